// Package alert delivers the alerts a Tracker logs (budget.Alert: a limit
// window's usage crossing one of its thresholds, or its first refusal of a
// reservation for want of room) to a webhook.
//
// Delivery is at least once. A Deliverer claims a few due alerts at a
// time (budget.Tracker.ClaimAlerts), POSTs each as one JSON document with
// an X-Budget-Alert-Id header (receivers deduplicate on it) and, with a
// secret, an X-Budget-Signature: sha256=<hex HMAC-SHA256 of the body>
// header; a 2xx answer marks the alert delivered, for good, anything else
// schedules another try (1 s, doubling, at most 5 minutes apart). Claims
// expire, so alerts claimed by a deliverer that died are taken over by
// another; any number of deliverers, in any number of processes, may run
// against one database, and each alert is tried by one at a time.
//
// A Deliverer is safe for concurrent use, but one RunOnce at a time is
// all it needs.
package alert

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Object is an alert as JSON: what `budget alerts ls --json` lists and
// the webhook receives. Amounts are in the limit's unit (micro-dollars for
// usd limits); times RFC3339 UTC; null where nothing applies.
type Object struct {
	ID      string  `json:"id"`
	LimitID string  `json:"limit_id"`
	Level   string  `json:"level"`
	Owner   *string `json:"owner"` // null for a default limit
	// Subject is whose counter crossed: "" for a key's, team's or org's
	// own, the key for a default limit, the end user (tag value) for a
	// per-user (per-tag-value) limit, "key/user" ("key/value") for a
	// default one.
	Subject string `json:"subject"`
	// Kind is "threshold" for a crossing, "exhausted" for a window whose
	// limit refused a reservation for want of room (its threshold null).
	Kind        string `json:"kind"`
	WindowStart string `json:"window_start"`
	Threshold   *int   `json:"threshold"`
	// Metric is what used and limit count: tokens, input, output, usd
	// (micro-dollars), requests...; null for an alert logged before
	// alerts kept it whose limit was gone by then.
	Metric       *string `json:"metric"`
	Used         int64   `json:"used"`
	Limit        int64   `json:"limit"`
	At           string  `json:"at"`
	ForecastUsed *int64  `json:"forecast_used"`
	ExhaustsAt   *string `json:"exhausts_at"`
	DeliveredAt  *string `json:"delivered_at"`
}

// ToObject is a's JSON form.
func ToObject(a *budget.Alert) Object {
	o := Object{ID: a.ID, LimitID: a.LimitID, Level: string(a.Level), Subject: budget.SubjectText(a.Subject),
		Kind: string(cmp.Or(a.Kind, budget.AlertThreshold)), WindowStart: ts(a.WindowStart), Used: a.Used, Limit: a.Max, At: ts(a.At)}
	if a.Kind != budget.AlertExhausted {
		v := a.Threshold
		o.Threshold = &v
	}
	if a.Metric != "" {
		v := string(a.Metric)
		o.Metric = &v
	}
	if a.Owner != "" {
		o.Owner = &a.Owner
	}
	if a.ForecastUsed >= 0 {
		v := a.ForecastUsed
		o.ForecastUsed = &v
	}
	if !a.ExhaustsAt.IsZero() {
		v := ts(a.ExhaustsAt)
		o.ExhaustsAt = &v
	}
	if !a.DeliveredAt.IsZero() {
		v := ts(a.DeliveredAt)
		o.DeliveredAt = &v
	}
	return o
}

func ts(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// Sign is the X-Budget-Signature value of body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// recordTimeout bounds recording a delivery's outcome.
const recordTimeout = 5 * time.Second

// Defaults of a Deliverer.
const (
	DefaultClaimTTL = time.Minute
	// DefaultBatch is one: a claim must outlast the POSTs of its batch,
	// and alerts are few.
	DefaultBatch   = 1
	DefaultTimeout = 10 * time.Second
)

// Deliverer POSTs a Tracker's alerts to URL.
type Deliverer struct {
	Tracker *budget.Tracker
	URL     string
	// Secret, when set, signs every body (X-Budget-Signature).
	Secret []byte
	// Owner names this deliverer in its claims; unique per process.
	// (Optional; default a random id.)
	Owner string
	// Client sends the POSTs. (Optional; default a client with
	// DefaultTimeout.)
	Client *http.Client
	// ClaimTTL is how long a claim lasts; it must outlast a batch of
	// POSTs (Batch x the client's timeout). (Optional; default
	// DefaultClaimTTL.)
	ClaimTTL time.Duration
	// Batch is how many alerts one claim takes. (Optional; default
	// DefaultBatch.)
	Batch int
}

// Result counts what one RunOnce did.
type Result struct {
	Delivered, Failed int
}

func (d *Deliverer) fill() {
	if d.Owner == "" {
		d.Owner = budget.NewID("dlv_")
	}
	if d.Client == nil {
		d.Client = NewClient(nil)
	}
	if d.ClaimTTL <= 0 {
		d.ClaimTTL = DefaultClaimTTL
	}
	if d.Batch <= 0 {
		d.Batch = DefaultBatch
	}
}

// RunOnce claims the due alerts (a batch at a time, until none is left)
// and tries each once. A failed POST is no error: the alert is scheduled
// again. Errors are the store's.
func (d *Deliverer) RunOnce(ctx context.Context) (Result, error) {
	d.fill()
	var res Result
	for {
		as, err := d.Tracker.ClaimAlerts(ctx, d.Owner, d.ClaimTTL, d.Batch)
		if err != nil || len(as) == 0 {
			return res, err
		}
		for i := range as {
			a := &as[i]
			perr := d.post(ctx, a)
			// The outcome is recorded even when ctx ended meanwhile (a
			// proxy stopping): a 2xx not recorded would be sent again.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
			if perr != nil {
				res.Failed++
				err = d.Tracker.AlertFailed(rctx, a.ID, d.Owner, a.Attempts+1)
			} else {
				res.Delivered++
				err = d.Tracker.AlertDelivered(rctx, a.ID, d.Owner)
			}
			cancel()
			if err != nil && !errors.Is(err, budget.ErrClaimLost) {
				return res, err
			}
		}
		if len(as) < d.Batch {
			return res, nil
		}
	}
}

// post sends a; nil means a 2xx answer.
func (d *Deliverer) post(ctx context.Context, a *budget.Alert) error {
	body, err := json.Marshal(ToObject(a))
	if err != nil {
		return err
	}
	return Post(ctx, d.Client, d.URL, "application/json", body, d.Secret, http.Header{"X-Budget-Alert-Id": {a.ID}})
}

// NewClient is a webhook's client: DefaultTimeout a POST, through rt
// (nil: http.DefaultTransport), following no redirect: a redirect turns
// the POST into a GET whose 2xx is no delivery, so it is a failure, tried
// again.
func NewClient(rt http.RoundTripper) *http.Client {
	return &http.Client{Timeout: DefaultTimeout, Transport: rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Post POSTs body to dest with c as contentType, header's fields set, and
// with a secret an X-Budget-Signature (Sign); nil means a 2xx answer. The
// answer's body is read (at most 64 KiB) and dropped.
//
// An error names the URL as RedactURL shows it: it is stored as the
// outbox's last error and printed by 'budget outbox ls', and a webhook's
// query often holds its token.
func Post(ctx context.Context, c *http.Client, dest, contentType string, body, secret []byte, header http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dest, bytes.NewReader(body))
	if err != nil {
		return redactedErr(err, dest)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", contentType)
	if len(secret) > 0 {
		req.Header.Set("X-Budget-Signature", Sign(secret, body))
	}
	resp, err := c.Do(req)
	if err != nil {
		return redactedErr(err, dest)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}

// Run calls RunOnce at once and then at every tick until ctx ends,
// reporting store errors to onErr (nil: ignored). A proxy ticks every
// second, so a retry is late by at most a second.
func (d *Deliverer) Run(ctx context.Context, tick <-chan time.Time, onErr func(error)) {
	Every(ctx, tick, onErr, func(ctx context.Context) error {
		_, err := d.RunOnce(ctx)
		return err
	})
}

// Every calls round at once and then at every tick until ctx ends,
// reporting its errors to onErr (nil: ignored) unless ctx ended: a
// deliverer's loop.
func Every(ctx context.Context, tick <-chan time.Time, onErr func(error), round func(context.Context) error) {
	for {
		if err := round(ctx); err != nil && onErr != nil && ctx.Err() == nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}

// RedactURL is dest as errors, tables and metrics show it: a URL with
// credentials or a query (where webhooks often carry a token) loses both,
// and its fragment, and gains "#" and 8 hex digits of its SHA-256 so that
// two such URLs stay apart. A URL that does not parse is "(unparsable
// URL)": its text may hold anything. Any other name is itself.
func RedactURL(dest string) string {
	u, err := url.Parse(dest)
	if err != nil {
		return "(unparsable URL)"
	}
	if (u.Scheme != "http" && u.Scheme != "https") || (u.User == nil && u.RawQuery == "" && u.Fragment == "") {
		return dest
	}
	sum := sha256.Sum256([]byte(dest))
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String() + "#" + hex.EncodeToString(sum[:4])
}

// redactedErr is err with the URL of its *url.Error (what http.Client
// and url.Parse return) redacted (RedactURL): named as dest is when it is
// dest (http.Client shows a password as "***", which would change the
// hash). Only that *url.Error is kept: a wrapper's message would repeat
// the URL.
func redactedErr(err error, dest string) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	r := *ue
	r.URL = RedactURL(ue.URL)
	if d := RedactURL(dest); unhashed(d) == unhashed(r.URL) {
		r.URL = d
	}
	return &r
}

// unhashed is a RedactURL without its hash.
func unhashed(s string) string {
	if i := strings.LastIndexByte(s, '#'); i >= 0 {
		return s[:i]
	}
	return s
}
