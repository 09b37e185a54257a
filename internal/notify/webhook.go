package notify

import (
	"bytes"
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
	"time"
)

// Headers of a webhook notification.
const (
	// SignatureHeader carries "sha256=" + hex(HMAC-SHA256(secret, body)), as GitHub signs its
	// webhooks, so receivers can reuse their verification code.
	SignatureHeader = "X-Shepherd-Signature-256"
	// DeliveryHeader carries the notification id; it is the same on every retry.
	DeliveryHeader = "X-Shepherd-Delivery"
	// EventHeader carries the notification type.
	EventHeader = "X-Shepherd-Event"
)

// WebhookSender posts notifications as JSON signed with HMAC-SHA256.
type WebhookSender struct {
	URL    string
	Secret []byte
	Client *http.Client
	// Now is the clock used to read Retry-After dates; time.Now when nil.
	Now func() time.Time
}

// Sign returns the value of SignatureHeader for body.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify reports whether signature is the right SignatureHeader value for body, in constant time.
func Verify(secret, body []byte, signature string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(signature))
}

// Send makes one attempt.
func (w *WebhookSender) Send(ctx context.Context, n Notification) error {
	body, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("encode notification: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return &PermanentError{Status: 0, Body: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "shepherd-notifier")
	req.Header.Set(SignatureHeader, Sign(w.Secret, body))
	req.Header.Set(DeliveryHeader, n.ID)
	req.Header.Set(EventHeader, n.Type)
	return do(w.Client, req, w.Now)
}

func do(c *http.Client, req *http.Request, now func() time.Time) error {
	if c == nil {
		c = http.DefaultClient
	}
	if now == nil {
		now = time.Now
	}
	resp, err := c.Do(req)
	if err != nil {
		// *url.Error prints the whole URL, and a Slack webhook URL is a credential: keep the
		// host only.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("post to %s: %w", req.URL.Host, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return classify(resp, string(b), now())
}
