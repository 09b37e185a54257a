package controller

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestLeaderLabelsAndAddress(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	held := func(labels map[string]string, renewed time.Time, holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "shepherd-system", Name: "l", Labels: labels},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
				RenewTime: &metav1.MicroTime{Time: renewed}}}
	}
	for _, tc := range []struct {
		name     string
		ip       string
		lease    func(map[string]string) *coordinationv1.Lease
		want     string // runner address; "" with wantErr
		noLeader bool
	}{
		{name: "IPv4", ip: "10.244.0.7", lease: func(l map[string]string) *coordinationv1.Lease { return held(l, now.Add(-time.Second), "pod-a_1") },
			want: "10.244.0.7:8090"},
		{name: "IPv6 travels as hex", ip: "fd00::a:7", lease: func(l map[string]string) *coordinationv1.Lease { return held(l, now, "pod-a_1") },
			want: "[fd00::a:7]:8090"},
		{name: "released", ip: "10.244.0.7", lease: func(l map[string]string) *coordinationv1.Lease { return held(l, now, "") }, noLeader: true},
		{name: "expired: the holder died", ip: "10.244.0.7",
			lease: func(l map[string]string) *coordinationv1.Lease { return held(l, now.Add(-16*time.Second), "pod-a_1") }, noLeader: true},
		{name: "a holder without POD_IP", ip: "10.244.0.7",
			lease: func(map[string]string) *coordinationv1.Lease { return held(nil, now, "pod-a_1") }, noLeader: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			labels, err := LeaderLabels(tc.ip, 8090, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := labels[LabelLeaderWebhookPort]; ok {
				t.Errorf("a server that is off has no port label: %v", labels)
			}
			for _, v := range labels {
				if len(v) > 63 {
					t.Errorf("label value %q is longer than a label allows", v)
				}
			}
			got, err := leaderAddress(tc.lease(labels), LabelLeaderRunnerPort, now)
			switch {
			case tc.noLeader && !errors.Is(err, errNoLeader):
				t.Errorf("got %q, %v; want errNoLeader", got, err)
			case !tc.noLeader && (err != nil || got != tc.want):
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := LeaderLabels("", 8090, 8091); err == nil {
		t.Error("an empty POD_IP is refused")
	}
}

// A request another standby forwarded reaches a replica that is not the leader either (its Lease
// read was stale): it is answered 503 with the not-leader mark, which makes the sender ask the
// Lease again, and never forwarded a second time.
func TestForwardedRequestIsNotForwardedAgain(t *testing.T) {
	served := false
	h := &toLeader{
		name:    "runner channel",
		locator: &leaderLocator{elected: make(chan struct{}), now: time.Now},
		local:   http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = true }),
		transport: func() (http.RoundTripper, error) {
			t.Fatal("a forwarded request was forwarded again")
			return nil, nil
		},
		slots: make(chan struct{}, 1),
	}
	req := httptest.NewRequest(http.MethodPost, "/runner/v1/reports", strings.NewReader("{}"))
	req.Header.Set(forwardedHeader, "1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get(notLeaderHeader) == "" || served {
		t.Errorf("answer %d, not-leader %q, served locally %v", rec.Code, rec.Header().Get(notLeaderHeader), served)
	}
}
