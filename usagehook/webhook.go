package usagehook

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/tokenbudget/tokenbudget/alert"
)

// Webhook POSTs each batch to URL as a JSON array of CloudEvents
// (BatchContentType); any 2xx answer is a delivery.
type Webhook struct {
	URL string
	// Secret, when set, signs every body as alerts are signed:
	// X-Budget-Signature: sha256=<hex HMAC-SHA256 of the body>.
	Secret []byte
	// Client sends the POSTs. (Optional; default alert.NewClient(nil):
	// alert.DefaultTimeout a POST, no redirect followed.)
	Client *http.Client
}

var defaultClient = alert.NewClient(nil)

// Send implements Sender.
func (w *Webhook) Send(ctx context.Context, batch []Event) error {
	body, err := json.Marshal(batch)
	if err != nil {
		return err
	}
	c := w.Client
	if c == nil {
		c = defaultClient
	}
	return alert.Post(ctx, c, w.URL, BatchContentType, body, w.Secret, nil)
}
