package scenario

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/shepherd-dev/shepherd/internal/notify"
)

// NotifySecret signs the Project's webhook notifications to the Receiver.
const NotifySecret = "scenario-notify-secret"

// Receiver is the Project's notification webhook: it checks every signature, counts each
// delivery id (so that duplicates show) and keeps the notifications in arrival order.
type Receiver struct {
	// OnNotification, when set before Start, sees each verified notification.
	OnNotification func(notify.Notification)

	secret []byte
	srv    *http.Server
	url    string

	mu    sync.Mutex
	byID  map[string]int
	got   []notify.Notification
	bad   int
	close sync.Once
}

// StartReceiver serves a Receiver on host (the node's IP), on a free port.
func StartReceiver(host string, onNotification func(notify.Notification)) (*Receiver, error) {
	r := &Receiver{OnNotification: onNotification, secret: []byte(NotifySecret), byID: map[string]int{}}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("notification receiver: %w", err)
	}
	r.url = "http://" + l.Addr().String() + "/"
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

// URL is where the Project's notification route points.
func (r *Receiver) URL() string { return r.url }

// Close stops the receiver.
func (r *Receiver) Close() error {
	var err error
	r.close.Do(func() { err = r.srv.Close() })
	return err
}

func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if !notify.Verify(r.secret, body, req.Header.Get(notify.SignatureHeader)) {
		r.mu.Lock()
		r.bad++
		r.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var n notify.Notification
	_ = json.Unmarshal(body, &n)
	r.mu.Lock()
	r.byID[req.Header.Get(notify.DeliveryHeader)]++
	r.got = append(r.got, n)
	cb := r.OnNotification
	r.mu.Unlock()
	if cb != nil {
		cb(n)
	}
	w.WriteHeader(http.StatusNoContent)
}

// Snapshot returns the deliveries per id, the notifications in arrival order and how many
// deliveries failed the signature check.
func (r *Receiver) Snapshot() (byID map[string]int, got []notify.Notification, bad int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byID = make(map[string]int, len(r.byID))
	for k, v := range r.byID {
		byID[k] = v
	}
	return byID, append([]notify.Notification(nil), r.got...), r.bad
}

// Types are the notifications' types in arrival order.
func (r *Receiver) Types() []string {
	_, got, _ := r.Snapshot()
	types := make([]string, 0, len(got))
	for _, n := range got {
		types = append(types, n.Type)
	}
	return types
}
