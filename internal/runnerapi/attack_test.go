package runnerapi_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/runnerapi/runnerapitest"
)

func call(t *testing.T, e *runnerapitest.Env, method, path, token string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, e.URL()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp
}

// 1000 garbage tokens cost no TokenReview: not JWTs, unsigned, for another audience, expired,
// not yet valid, not bound to a pod, oversized. A well-formed token the API server refuses costs
// one review, however often it is sent.
func TestAttackGarbageTokensCostNoReview(t *testing.T) {
	e, err := runnerapitest.Start(types.NamespacedName{Namespace: "team", Name: "s"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	pod := e.Pod
	unbound := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team"}}
	now := time.Now()
	alg := func(tok, alg string) string {
		parts := strings.SplitN(tok, ".", 2)
		return base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"`+alg+`"}`)) + "." + parts[1]
	}
	kinds := []func(i int) string{
		func(i int) string { return fmt.Sprintf("garbage-%d", i) },
		func(i int) string { return fmt.Sprintf("a.b.c%d", i) },
		func(i int) string {
			return runnerapitest.JWTFor(pod, "kubernetes.default.svc", now, now.Add(time.Hour), fmt.Sprint(i))
		},
		func(i int) string {
			return runnerapitest.JWTFor(pod, runnerapi.Audience, now.Add(-time.Hour), now.Add(-time.Minute), fmt.Sprint(i))
		},
		func(i int) string {
			return runnerapitest.JWTFor(pod, runnerapi.Audience, now.Add(24*time.Hour), now.Add(48*time.Hour), fmt.Sprint(i))
		}, // not valid for a day
		func(i int) string {
			return runnerapitest.JWTFor(unbound, runnerapi.Audience, now, now.Add(time.Hour), fmt.Sprint(i))
		},
		func(i int) string {
			return alg(runnerapitest.JWTFor(pod, runnerapi.Audience, now, now.Add(time.Hour), fmt.Sprint(i)), "none")
		},
		func(i int) string { return strings.Repeat("x", runnerapi.MaxTokenBytes+i) },
	}
	for i := range 1000 {
		tok := kinds[i%len(kinds)](i)
		if resp := call(t, e, http.MethodGet, runnerapi.PathTask, tok, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("token kind %d: status %d", i%len(kinds), resp.StatusCode)
		}
	}
	if st := e.Handler.AuthStats(); st.Reviews != 0 || st.Prechecked != 1000 {
		t.Fatalf("after 1000 garbage tokens: %+v, want no review and 1000 prechecked", st)
	}

	forged := runnerapitest.JWTFor(pod, runnerapi.Audience, now, now.Add(time.Hour), "forged")
	for range 1000 {
		if resp := call(t, e, http.MethodGet, runnerapi.PathTask, forged, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("forged token: status %d", resp.StatusCode)
		}
	}
	if st := e.Handler.AuthStats(); st.Reviews != 1 || st.NegativeHits != 999 {
		t.Fatalf("a forged token sent 1000 times: %+v, want one review", st)
	}

	real, err := os.ReadFile(e.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	e.Backend.SetTask(e.Session, runnerapi.Task{Prompt: "p", Branch: "shepherd/s", BaseBranch: "main"})
	if resp := call(t, e, http.MethodGet, runnerapi.PathTask, string(real), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the pod's own token: status %d", resp.StatusCode)
	}
}

// An agent flooding the pull request endpoint spends its own allowance: after the burst, 429
// with Retry-After, and the backend (the forge) sees no more calls.
func TestAttackPullRequestFloodIsRateLimited(t *testing.T) {
	e, err := runnerapitest.Start(types.NamespacedName{Namespace: "team", Name: "s"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.Backend.SetTask(e.Session, runnerapi.Task{Prompt: "p", Branch: "shepherd/s", BaseBranch: "main"})
	token, err := os.ReadFile(e.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[int]int{}
	retryAfter := ""
	for i := range 200 {
		body := fmt.Appendf(nil, `{"branch":"shepherd/s","base":"main","head":"%040d","title":"title %d"}`, i, i%2)
		resp := call(t, e, http.MethodPost, runnerapi.PathPullRequest, string(token), body)
		codes[resp.StatusCode]++
		if resp.StatusCode == http.StatusTooManyRequests {
			retryAfter = resp.Header.Get("Retry-After")
		}
	}
	if codes[http.StatusOK] != runnerapi.LimitPullRequest.Burst || codes[http.StatusTooManyRequests] != 200-runnerapi.LimitPullRequest.Burst {
		t.Fatalf("200 calls at once: %v, want %d answered and the rest 429", codes, runnerapi.LimitPullRequest.Burst)
	}
	if retryAfter == "" {
		t.Error("429 without Retry-After")
	}
	if n := len(e.Backend.PullRequests(e.Session)); n != runnerapi.LimitPullRequest.Burst {
		t.Errorf("the backend saw %d calls, want %d", n, runnerapi.LimitPullRequest.Burst)
	}
}

// FuzzChannelRequests: any body the runner (or an agent holding its pod) posts to the channel's
// endpoints is answered with a client error or accepted, never a panic or a server error.
func FuzzChannelRequests(f *testing.F) {
	e, err := runnerapitest.Start(types.NamespacedName{Namespace: "team", Name: "s"}, f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(e.Close)
	e.Backend.SetTask(e.Session, runnerapi.Task{Prompt: "p", Branch: "shepherd/s", BaseBranch: "main"})
	token, err := os.ReadFile(e.TokenFile)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(0), []byte(`{"sequence":1,"activity":{"state":"Active"},"agent":{"model":"m"}}`))
	f.Add(uint8(0), []byte(`{"sequence":18446744073709551615,"usage":{"costUSD":"1e308","inputTokens":-1}}`))
	f.Add(uint8(1), []byte(`{"branch":"shepherd/s","base":"main","head":"`+strings.Repeat("a", 40)+`","title":"t","body":"b"}`))
	f.Add(uint8(1), []byte(`{"branch":"main","base":"main","head":"x","title":""}`))
	f.Add(uint8(2), []byte(`{}`))
	paths := []string{runnerapi.PathReports, runnerapi.PathPullRequest, runnerapi.PathMessages + "/m1/ack"}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		req := httptest.NewRequest(http.MethodPost, paths[int(which)%len(paths)], bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+string(token))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.Handler.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s: status %d: %s", req.URL.Path, rec.Code, rec.Body.String())
		}
	})
}
