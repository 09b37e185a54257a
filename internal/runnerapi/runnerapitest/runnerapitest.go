// Package runnerapitest runs the real runnerapi handler in memory for tests and the offline demo:
// an in-memory Backend, a token reviewer that knows tokens handed out here, and an httptest
// server, so the runner can be exercised end to end without a cluster. The envtest suite of
// runnerapi covers the real TokenReview path.
package runnerapitest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/transcript"
)

// MemoryBackend is a runnerapi.Backend that keeps everything in memory, with the semantics the
// AgentSession controller must have: reports fold into the task's resume state, messages are
// pending until acknowledged once, the pull request is opened once and updated after.
type MemoryBackend struct {
	mu      sync.Mutex
	tasks   map[types.NamespacedName]*runnerapi.Task
	reports map[types.NamespacedName][]runnerapi.Report
	pending map[types.NamespacedName][]runnerapi.Message
	acked   map[types.NamespacedName][]string
	prs     map[types.NamespacedName][]runnerapi.PullRequestRequest
	remote  *runnerapi.GitRemote
	gitAsks int
	// prErr, when set, is what OpenPullRequest answers (the forge refusing, say).
	prErr error
	// OnMessage is called after AddMessage (wire it to Handler.Wake).
	OnMessage func(types.NamespacedName)
	// Transcripts holds what runners streamed, a window per session as the manager keeps it.
	Transcripts transcript.Store
}

// NewMemoryBackend returns an empty backend.
func NewMemoryBackend() *MemoryBackend {
	return &MemoryBackend{
		tasks: map[types.NamespacedName]*runnerapi.Task{}, reports: map[types.NamespacedName][]runnerapi.Report{},
		pending: map[types.NamespacedName][]runnerapi.Message{}, acked: map[types.NamespacedName][]string{},
		prs: map[types.NamespacedName][]runnerapi.PullRequestRequest{},
	}
}

// SetTask sets a session's task.
func (b *MemoryBackend) SetTask(s types.NamespacedName, t runnerapi.Task) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tasks[s] = &t
}

// SetGitRemote sets the repository (and the credentials the handler adds) GitRemote answers
// with; the branch it may push is the session's.
func (b *MemoryBackend) SetGitRemote(url string, header http.Header) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.remote = &runnerapi.GitRemote{URL: url, Header: header}
}

// GitRequests counts the git requests forwarded.
func (b *MemoryBackend) GitRequests() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gitAsks
}

// AddMessage queues a follow-up for the session.
func (b *MemoryBackend) AddMessage(s types.NamespacedName, m runnerapi.Message) {
	b.mu.Lock()
	b.pending[s] = append(b.pending[s], m)
	b.mu.Unlock()
	if b.OnMessage != nil {
		b.OnMessage(s)
	}
}

// Reports returns the reports received for the session.
func (b *MemoryBackend) Reports(s types.NamespacedName) []runnerapi.Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.reports[s])
}

// Acked returns the acknowledged message ids, in order.
func (b *MemoryBackend) Acked(s types.NamespacedName) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.acked[s])
}

// PullRequests returns the pull request requests received, in order.
func (b *MemoryBackend) PullRequests(s types.NamespacedName) []runnerapi.PullRequestRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.prs[s])
}

// Activity returns the latest activity reported, or nil.
func (b *MemoryBackend) Activity(s types.NamespacedName) *runnerapi.ActivityReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	reps := b.reports[s]
	for i := len(reps) - 1; i >= 0; i-- {
		if reps[i].Activity != nil {
			a := *reps[i].Activity
			return &a
		}
	}
	return nil
}

// States returns the sequence of distinct activity states reported.
func (b *MemoryBackend) States(s types.NamespacedName) []agentsv1alpha1.ActivityState {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []agentsv1alpha1.ActivityState
	for _, r := range b.reports[s] {
		if r.Activity != nil && (len(out) == 0 || out[len(out)-1] != r.Activity.State) {
			out = append(out, r.Activity.State)
		}
	}
	return out
}

// Task implements runnerapi.Backend.
func (b *MemoryBackend) Task(_ context.Context, s runnerapi.Session) (*runnerapi.Task, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tasks[s.NamespacedName]
	if !ok {
		return nil, fmt.Errorf("session %s: %w", s.NamespacedName, runnerapi.ErrNotFound)
	}
	c := *t
	return &c, nil
}

// Report implements runnerapi.Backend.
func (b *MemoryBackend) Report(_ context.Context, s runnerapi.Session, r runnerapi.Report) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tasks[s.NamespacedName]
	if !ok {
		return fmt.Errorf("session %s: %w", s.NamespacedName, runnerapi.ErrNotFound)
	}
	if r.Sequence <= t.LastSequence {
		return fmt.Errorf("sequence %d already seen: %w", r.Sequence, runnerapi.ErrConflict)
	}
	t.LastSequence = r.Sequence
	if r.Agent != nil && r.Agent.SessionID != "" {
		t.AgentSessionID = r.Agent.SessionID
	}
	if r.Activity != nil {
		t.LastActivity = r.Activity.State
	}
	if r.Usage != nil {
		t.Usage = *r.Usage
	}
	b.reports[s.NamespacedName] = append(b.reports[s.NamespacedName], r)
	return nil
}

// Pending implements runnerapi.Backend.
func (b *MemoryBackend) Pending(_ context.Context, s runnerapi.Session) ([]runnerapi.Message, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.pending[s.NamespacedName]), nil
}

// Ack implements runnerapi.Backend.
func (b *MemoryBackend) Ack(_ context.Context, s runnerapi.Session, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if slices.Contains(b.acked[s.NamespacedName], id) {
		return fmt.Errorf("message %q already acknowledged: %w", id, runnerapi.ErrConflict)
	}
	msgs := b.pending[s.NamespacedName]
	i := slices.IndexFunc(msgs, func(m runnerapi.Message) bool { return m.ID == id })
	if i < 0 {
		return fmt.Errorf("message %q: %w", id, runnerapi.ErrNotFound)
	}
	b.pending[s.NamespacedName] = slices.Delete(msgs, i, i+1)
	b.acked[s.NamespacedName] = append(b.acked[s.NamespacedName], id)
	return nil
}

// Transcript implements runnerapi.Backend.
func (b *MemoryBackend) Transcript(_ context.Context, s runnerapi.Session, batch transcript.Batch) (uint64, error) {
	b.mu.Lock()
	_, ok := b.tasks[s.NamespacedName]
	b.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("session %s: %w", s.NamespacedName, runnerapi.ErrNotFound)
	}
	return b.Transcripts.Append(s.NamespacedName, s.OwnerUID, batch.Entries), nil
}

// SetPullRequestError makes OpenPullRequest answer err (nil: answer normally again). Refused
// requests are not recorded.
func (b *MemoryBackend) SetPullRequestError(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.prErr = err
}

// OpenPullRequest implements runnerapi.Backend.
func (b *MemoryBackend) OpenPullRequest(_ context.Context, s runnerapi.Session, req runnerapi.PullRequestRequest) (*runnerapi.PullRequestResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.prErr != nil {
		return nil, b.prErr
	}
	t, ok := b.tasks[s.NamespacedName]
	if !ok {
		return nil, fmt.Errorf("session %s: %w", s.NamespacedName, runnerapi.ErrNotFound)
	}
	if req.Branch != t.Branch {
		return nil, fmt.Errorf("branch %q is not the session's branch: %w", req.Branch, runnerapi.ErrForbidden)
	}
	b.prs[s.NamespacedName] = append(b.prs[s.NamespacedName], req)
	created := t.PullRequest == nil
	if created {
		t.PullRequest = &runnerapi.PullRequestResult{Number: 1, URL: "https://forge.example/acme/widgets/pull/1"}
	}
	res := *t.PullRequest
	res.Created = created
	return &res, nil
}

// GitRemote implements runnerapi.Backend.
func (b *MemoryBackend) GitRemote(_ context.Context, s runnerapi.Session) (*runnerapi.GitRemote, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.remote == nil {
		return nil, fmt.Errorf("no repository configured: %w", runnerapi.ErrNotFound)
	}
	b.gitAsks++
	r := *b.remote
	if t, ok := b.tasks[s.NamespacedName]; ok && s.IsSession() {
		r.Branch = t.Branch
	}
	return &r, nil
}

// StaticReviewer accepts the tokens it handed out, as the API server would for pod-bound tokens.
type StaticReviewer struct {
	mu     sync.Mutex
	tokens map[string]authnv1.UserInfo
}

// Review implements runnerapi.TokenReviewer.
func (r *StaticReviewer) Review(_ context.Context, token string, audiences []string) (*authnv1.TokenReviewStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u, ok := r.tokens[token]
	if !ok {
		return &authnv1.TokenReviewStatus{Error: "invalid bearer token"}, nil
	}
	return &authnv1.TokenReviewStatus{Authenticated: true, User: u, Audiences: audiences}, nil
}

// JWTFor returns a token shaped as the kubelet projects one for pod (a JWT of audience aud,
// valid from nbf to exp, bound to the pod), with sig in place of a signature: what the channel's
// precheck reads before it asks for a review. Only a reviewer that knows the token accepts it.
func JWTFor(pod *corev1.Pod, aud string, nbf, exp time.Time, sig string) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	head := enc(map[string]string{"alg": "RS256", "kid": "test"})
	claims := enc(map[string]any{
		"aud": []string{aud}, "exp": exp.Unix(), "iat": nbf.Unix(), "nbf": nbf.Unix(),
		"iss": "https://kubernetes.default.svc", "sub": "system:serviceaccount:" + pod.Namespace + ":" + pod.Spec.ServiceAccountName,
		"kubernetes.io": map[string]any{"namespace": pod.Namespace, "pod": map[string]string{"name": pod.Name, "uid": string(pod.UID)},
			"serviceaccount": map[string]string{"name": pod.Spec.ServiceAccountName}},
	})
	return head + "." + claims + "." + base64.RawURLEncoding.EncodeToString([]byte(sig))
}

// Issue returns a new token bound to pod.
func (r *StaticReviewer) Issue(pod *corev1.Pod) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tokens == nil {
		r.tokens = map[string]authnv1.UserInfo{}
	}
	token := JWTFor(pod, runnerapi.Audience, time.Now().Add(-time.Minute), time.Now().Add(24*time.Hour), fmt.Sprintf("sig-%d", len(r.tokens)))
	r.tokens[token] = authnv1.UserInfo{
		Username: "system:serviceaccount:" + pod.Namespace + ":" + pod.Spec.ServiceAccountName,
		Extra: map[string]authnv1.ExtraValue{
			runnerapi.ExtraPodName: {pod.Name}, runnerapi.ExtraPodUID: {string(pod.UID)},
		},
	}
	return token
}

// Env is a running test manager endpoint for one session.
type Env struct {
	Server    *httptest.Server
	Handler   *runnerapi.Handler
	Backend   *MemoryBackend
	Reviewer  *StaticReviewer
	Session   types.NamespacedName
	Pod       *corev1.Pod
	TokenFile string
}

// URL of the endpoint.
func (e *Env) URL() string { return e.Server.URL }

// Close stops the server.
func (e *Env) Close() { e.Server.Close() }

// Start serves the real handler for session (namespace/name) with an agent pod, and writes a
// token for that pod into dir/token.
func Start(session types.NamespacedName, dir string) (*Env, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: session.Namespace, Name: runnerapi.DefaultPodNames.AgentPod(session.Name), UID: types.UID("uid-" + session.Name),
			Labels: map[string]string{agentsv1alpha1.LabelSession: session.Name, agentsv1alpha1.LabelProject: "widgets",
				agentsv1alpha1.LabelComponent: "agent", agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByValue},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentSession",
				Name: session.Name, UID: types.UID("session-uid-" + session.Name), Controller: ptr(true)}}},
		Spec: corev1.PodSpec{ServiceAccountName: runnerapi.DefaultPodNames.ServiceAccount("widgets")},
	}
	backend := NewMemoryBackend()
	reviewer := &StaticReviewer{}
	h, err := runnerapi.NewHandler(runnerapi.HandlerOptions{
		Backend: backend, Reviewer: reviewer, Pods: PodReader{Pod: pod},
	})
	if err != nil {
		return nil, err
	}
	backend.OnMessage = h.Wake
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(reviewer.Issue(pod)), 0o600); err != nil {
		return nil, fmt.Errorf("write token: %w", err)
	}
	return &Env{Server: httptest.NewServer(h), Handler: h, Backend: backend, Reviewer: reviewer, Session: session, Pod: pod, TokenFile: tokenFile}, nil
}

func ptr[T any](v T) *T { return &v }

// PodReader serves one pod to the handler, which only ever Gets the caller's pod. The channel's
// behaviour against a real API server is tested in the runnerapi envtest suite; this is for the
// runner's own tests and the offline demo, which have no API server.
type PodReader struct{ Pod *corev1.Pod }

// Get returns the pod when key names it.
func (r PodReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	pod, ok := obj.(*corev1.Pod)
	if !ok || key.Namespace != r.Pod.Namespace || key.Name != r.Pod.Name {
		return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
	}
	r.Pod.DeepCopyInto(pod)
	return nil
}

// List is not used by the handler.
func (r PodReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("PodReader serves Get only")
}
