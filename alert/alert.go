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
		// A redirect would turn the POST into a GET whose 2xx is no
		// delivery: it is a failure, tried again.
		d.Client = &http.Client{Timeout: DefaultTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
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
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Budget-Alert-Id", a.ID)
	if len(d.Secret) > 0 {
		req.Header.Set("X-Budget-Signature", Sign(d.Secret, body))
	}
	resp, err := d.Client.Do(req)
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

// Run calls RunOnce at once and then at every tick until ctx ends,
// reporting store errors to onErr (nil: ignored). A proxy ticks every
// second, so a retry is late by at most a second.
func (d *Deliverer) Run(ctx context.Context, tick <-chan time.Time, onErr func(error)) {
	for {
		if _, err := d.RunOnce(ctx); err != nil && onErr != nil && ctx.Err() == nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}
