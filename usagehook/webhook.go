package usagehook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tokenbudget/tokenbudget/alert"
)

// DefaultTimeout bounds one POST of a Webhook's default client.
const DefaultTimeout = 10 * time.Second

// Webhook POSTs each batch to URL as a JSON array of CloudEvents
// (BatchContentType); any 2xx answer is a delivery.
type Webhook struct {
	URL string
	// Secret, when set, signs every body as alerts are signed:
	// X-Budget-Signature: sha256=<hex HMAC-SHA256 of the body>.
	Secret []byte
	// Client sends the POSTs. (Optional; default one with DefaultTimeout
	// that follows no redirect: a redirect turns a POST into a GET whose
	// 2xx is no delivery.)
	Client *http.Client
}

var defaultClient = &http.Client{Timeout: DefaultTimeout,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// Send implements Sender.
func (w *Webhook) Send(ctx context.Context, batch []Event) error {
	body, err := json.Marshal(batch)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", BatchContentType)
	if len(w.Secret) > 0 {
		req.Header.Set("X-Budget-Signature", alert.Sign(w.Secret, body))
	}
	c := w.Client
	if c == nil {
		c = defaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}
