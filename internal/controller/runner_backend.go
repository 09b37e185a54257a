package controller

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
	"github.com/shepherd-dev/shepherd/internal/transcript"
)

// RunnerBackend answers the runners' calls on the manager's channel (internal/runnerapi does the
// authentication and maps each caller to its own session). Reports go to the in-memory
// ReportStore and wake the session's reconcile; message acknowledgements are written to the
// session's status at once, so that a restart never delivers a message twice.
type RunnerBackend struct {
	*Deps

	ackMu sync.Mutex
	// acked holds the ids this process acknowledged that the cache may not show as delivered
	// yet: Pending reads the cache, and a runner that acks and polls again at once must not get
	// the same message back. An id leaves once the cache shows it delivered.
	acked map[types.NamespacedName]map[string]bool
}

var _ runnerapi.Backend = (*RunnerBackend)(nil)

func (b *RunnerBackend) load(ctx context.Context, s runnerapi.Session) (*agentsv1alpha1.AgentSession, *agentsv1alpha1.Project, error) {
	sess := &agentsv1alpha1.AgentSession{}
	if err := b.Client.Get(ctx, s.NamespacedName, sess); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("session %s: %w", s.NamespacedName, runnerapi.ErrNotFound)
		}
		return nil, nil, fmt.Errorf("get session: %w", err)
	}
	if err := ownedBy(sess, s); err != nil {
		return nil, nil, err
	}
	p := &agentsv1alpha1.Project{}
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: sess.Namespace, Name: sess.Spec.ProjectRef.Name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("project %s: %w", sess.Spec.ProjectRef.Name, runnerapi.ErrNotFound)
		}
		return nil, nil, fmt.Errorf("get project: %w", err)
	}
	return sess, p, nil
}

// Transcript adds the runner's entries to the session's window (in memory, never in etcd).
func (b *RunnerBackend) Transcript(ctx context.Context, s runnerapi.Session, batch transcript.Batch) (uint64, error) {
	sess := &agentsv1alpha1.AgentSession{}
	if err := b.Client.Get(ctx, s.NamespacedName, sess); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("session %s: %w", s.NamespacedName, runnerapi.ErrNotFound)
		}
		return 0, fmt.Errorf("get session: %w", err)
	}
	if err := ownedBy(sess, s); err != nil {
		return 0, err
	}
	return b.Transcripts.Append(s.NamespacedName, sess.UID, batch.Entries), nil
}

// ownedBy refuses a caller whose pod's controller is not this session: a pod left from an
// earlier session of the same name gets nothing of the new one.
func ownedBy(sess *agentsv1alpha1.AgentSession, s runnerapi.Session) error {
	if sess.UID != s.OwnerUID {
		return fmt.Errorf("pod %s does not belong to session %s as it is now: %w", s.PodName, s.Name, runnerapi.ErrForbidden)
	}
	return nil
}

// Task is the session's task: the prompt (rendered from the issue when there is one), the agent
// settings and what a restored runner needs to resume.
func (b *RunnerBackend) Task(ctx context.Context, s runnerapi.Session) (*runnerapi.Task, error) {
	sess, p, err := b.load(ctx, s)
	if err != nil {
		return nil, err
	}
	agent := mergeAgent(p.Spec.Agent, sess.Spec.Agent)
	t := &runnerapi.Task{
		Agent: runnerapi.AgentConfig{
			Type: agent.Type, Model: agent.Model, PermissionMode: agent.PermissionMode,
			ExtraArgs: agent.ExtraArgs, ExtraInstructions: agent.ExtraInstructions,
		},
		Prompt:         sess.Spec.Prompt,
		Title:          sess.Spec.Title,
		Repository:     string(p.Spec.Repository.URL),
		Branch:         sess.Status.Branch,
		BaseBranch:     string(p.Spec.Repository.DefaultBranch),
		AgentSessionID: sess.Status.Agent.SessionID,
	}
	if c := agent.Custom; c != nil {
		t.Agent.Custom = &runnerapi.CustomAgent{Command: append([]string(nil), c.Command...), Output: c.Output}
	}
	if t.Agent.PermissionMode == "" {
		t.Agent.PermissionMode = agentsv1alpha1.PermissionBypass
	}
	if a := sess.Status.Activity; a != nil {
		t.LastActivity = a.State
	}
	if u := sess.Status.Usage; u != nil {
		t.Usage = taskUsage(u)
	}
	if pr := sess.Status.PullRequest; pr != nil {
		t.PullRequest = &runnerapi.PullRequestResult{Number: pr.Number, URL: pr.URL}
	}
	if sess.Spec.Issue != "" {
		if err := b.issueTask(ctx, sess, p, t); err != nil {
			return nil, err
		}
	}
	if t.Title == "" {
		t.Title = firstLine(t.Prompt, 120)
	}
	return t, nil
}

func (b *RunnerBackend) issueTask(ctx context.Context, sess *agentsv1alpha1.AgentSession, p *agentsv1alpha1.Project, t *runnerapi.Task) error {
	f, err := b.connectForge(ctx, p)
	if err != nil {
		return fmt.Errorf("connect to the forge: %w", err)
	}
	tr, err := b.connectTracker(ctx, p, f)
	if err != nil {
		return fmt.Errorf("connect to the tracker: %w", err)
	}
	if tr == nil {
		return fmt.Errorf("project %s has no tracker: %w", p.Name, runnerapi.ErrInvalid)
	}
	cctx, cancel := context.WithTimeout(ctx, forgeCallTimeout)
	defer cancel()
	issue, err := tr.GetIssue(cctx, strings.TrimPrefix(sess.Spec.Issue, "#"))
	if err != nil {
		return fmt.Errorf("read issue %s: %w", sess.Spec.Issue, err)
	}
	repo, _ := scm.ParseRepoURL(string(p.Spec.Repository.URL))
	tmpl := tracker.DefaultPromptTemplate
	if p.Spec.Tracker != nil && p.Spec.Tracker.PromptTemplate != "" {
		tmpl = p.Spec.Tracker.PromptTemplate
	}
	heard := *issue
	heard.Comments, heard.OmittedComments = trustedAuthors(p).issueComments(issue.Comments)
	prompt, err := tracker.RenderPrompt(tmpl, tracker.NewPromptData(&heard, tracker.PromptProject{
		Name: p.Name, Namespace: p.Namespace, Repository: repo.String(), DefaultBranch: string(p.Spec.Repository.DefaultBranch),
	}, sess.Status.Branch))
	if err != nil {
		return fmt.Errorf("render the Project's prompt template: %w", err)
	}
	t.Prompt = prompt
	t.Issue = &runnerapi.Issue{ID: issue.ID, URL: issue.URL, Title: issue.Title}
	if t.Title == "" {
		t.Title = issue.Title
	}
	return nil
}

func firstLine(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// Report stores the runner's report and wakes the session.
func (b *RunnerBackend) Report(_ context.Context, s runnerapi.Session, r runnerapi.Report) error {
	b.Reports.Update(s.NamespacedName, s.PodUID, s.Worktree, b.now(), r)
	return nil
}

// Pending lists the messages queued for the agent and not yet acknowledged, oldest first.
func (b *RunnerBackend) Pending(ctx context.Context, s runnerapi.Session) ([]runnerapi.Message, error) {
	sess := &agentsv1alpha1.AgentSession{}
	if err := b.Client.Get(ctx, s.NamespacedName, sess); err != nil {
		return nil, fmt.Errorf("get session: %w", err)
	}
	if err := ownedBy(sess, s); err != nil {
		return nil, err
	}
	msgs := pendingMessages(sess)
	b.ackMu.Lock()
	defer b.ackMu.Unlock()
	acked := b.acked[s.NamespacedName]
	for id := range acked {
		if slices.Contains(sess.Status.Messages.Delivered, id) {
			delete(acked, id) // the cache has caught up
		}
	}
	if len(acked) == 0 {
		delete(b.acked, s.NamespacedName)
		return msgs, nil
	}
	return slices.DeleteFunc(msgs, func(m runnerapi.Message) bool { return acked[m.ID] }), nil
}

// pendingMessages resolves the outbox: user messages take their text from the spec. Pure.
func pendingMessages(sess *agentsv1alpha1.AgentSession) []runnerapi.Message {
	out := []runnerapi.Message{}
	for _, m := range sess.Status.Messages.Pending {
		if slices.Contains(sess.Status.Messages.Delivered, m.ID) {
			continue
		}
		text := m.Text
		if m.Source == agentsv1alpha1.MessageFromUser {
			for _, sm := range sess.Spec.Messages {
				if sm.ID == m.ID {
					text = sm.Text
				}
			}
		}
		if text == "" {
			continue
		}
		out = append(out, runnerapi.Message{ID: m.ID, Text: text, Source: m.Source})
	}
	return out
}

// maxDelivered is the API's bound on status.messages.delivered.
const maxDelivered = 256

// Ack moves a message from pending to delivered in the session's status, at once.
func (b *RunnerBackend) Ack(ctx context.Context, s runnerapi.Session, id string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sess := &agentsv1alpha1.AgentSession{}
		if err := b.APIReader.Get(ctx, s.NamespacedName, sess); err != nil {
			return fmt.Errorf("get session: %w", err)
		}
		if err := ownedBy(sess, s); err != nil {
			return err
		}
		if err := ackMessage(&sess.Status.Messages, sess.Spec.Messages, id); err != nil {
			return err
		}
		return b.Client.Status().Update(ctx, sess)
	})
	if err != nil {
		return err
	}
	b.ackMu.Lock()
	if b.acked == nil {
		b.acked = map[types.NamespacedName]map[string]bool{}
	}
	if b.acked[s.NamespacedName] == nil {
		b.acked[s.NamespacedName] = map[string]bool{}
	}
	b.acked[s.NamespacedName][id] = true
	b.ackMu.Unlock()
	if b.Reports.OnChange != nil {
		b.Reports.OnChange(s.NamespacedName)
	}
	return nil
}

// ackMessage records the delivery of id. Pure. Spec message ids are never pruned from the
// delivered list (that would queue them again); reaction ids, which the lifecycle never queues
// twice, go first when the list is full.
func ackMessage(m *agentsv1alpha1.MessagesStatus, spec []agentsv1alpha1.Message, id string) error {
	if slices.Contains(m.Delivered, id) {
		return fmt.Errorf("message %q was already acknowledged: %w", id, runnerapi.ErrConflict)
	}
	i := slices.IndexFunc(m.Pending, func(p agentsv1alpha1.OutboxMessage) bool { return p.ID == id })
	if i < 0 {
		return fmt.Errorf("message %q is not pending: %w", id, runnerapi.ErrNotFound)
	}
	m.Pending = slices.Delete(m.Pending, i, i+1)
	if len(m.Pending) == 0 {
		m.Pending = nil
	}
	m.Delivered = append(m.Delivered, id)
	isSpec := func(id string) bool {
		return slices.ContainsFunc(spec, func(sm agentsv1alpha1.Message) bool { return sm.ID == id })
	}
	for len(m.Delivered) > maxDelivered {
		j := slices.IndexFunc(m.Delivered, func(d string) bool { return !isSpec(d) })
		if j < 0 {
			j = 0
		}
		m.Delivered = slices.Delete(m.Delivered, j, j+1)
	}
	return nil
}

// pullRequestWait bounds how long the runner's call waits for the OpenPullRequest action: the
// forge call's own timeout, and the reconcile that runs it.
const pullRequestWait = forgeCallTimeout + 15*time.Second

// OpenPullRequest hands the runner's request to the session's next decision (its
// OpenPullRequest action opens the pull request, or retitles the open one) and waits for the
// action's answer. The call is answered with an error when the manager stops or the wait runs
// out; the runner asks again, and the forge keeps one open pull request per head branch.
func (b *RunnerBackend) OpenPullRequest(ctx context.Context, s runnerapi.Session, req runnerapi.PullRequestRequest) (*runnerapi.PullRequestResult, error) {
	sess, p, err := b.load(ctx, s)
	if err != nil {
		return nil, err
	}
	if sess.Status.Branch != "" && req.Branch != sess.Status.Branch {
		return nil, fmt.Errorf("branch %q is not the session's (%s): %w", req.Branch, sess.Status.Branch, runnerapi.ErrForbidden)
	}
	if sess.Status.Phase.IsTerminal() {
		return nil, fmt.Errorf("the session is %s: %w", sess.Status.Phase, runnerapi.ErrConflict)
	}
	if req.Base == "" {
		req.Base = string(p.Spec.Repository.DefaultBranch)
	}
	answer := b.Reports.AskPullRequest(s.NamespacedName, req)
	wait := time.NewTimer(pullRequestWait)
	defer wait.Stop()
	select {
	case ans := <-answer:
		return ans.Result, ans.Err
	case <-ctx.Done():
		return nil, fmt.Errorf("open pull request: %w", context.Cause(ctx))
	case <-wait.C:
		return nil, fmt.Errorf("open pull request: no decision ran it within %s: %w", pullRequestWait, context.DeadlineExceeded)
	}
}

// GitRemote is where the caller's git goes: the Project's repository, with a credential the
// manager adds to each request (a GitHub App token minted for the one repository with contents
// access, or the Project's token). No credential is ever handed to a pod. A session may push its
// own branch; a checkout pod (no session) pushes nothing.
func (b *RunnerBackend) GitRemote(ctx context.Context, s runnerapi.Session) (*runnerapi.GitRemote, error) {
	p, branch, err := b.caller(ctx, s)
	if err != nil {
		return nil, err
	}
	remote := &runnerapi.GitRemote{URL: string(p.Spec.Repository.URL), Header: http.Header{}, Branch: branch}
	if p.Spec.Repository.Credentials == nil {
		return remote, nil // a public repository: read-only, as the forge decides
	}
	f, err := b.connectForge(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("connect to the forge: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, forgeCallTimeout)
	defer cancel()
	c, err := f.Conn.Provider.PushCredential(cctx, f.Repo)
	if err != nil {
		return nil, fmt.Errorf("issue a git credential: %w", err)
	}
	remote.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(c.Username+":"+c.Password)))
	return remote, nil
}

// caller reads the Project of a runner's caller and the branch it may push, checking that the
// pod's controller is the object of that name now (not an earlier one).
func (b *RunnerBackend) caller(ctx context.Context, s runnerapi.Session) (*agentsv1alpha1.Project, string, error) {
	if s.IsSession() {
		sess, p, err := b.load(ctx, s)
		if err != nil {
			return nil, "", err
		}
		return p, sess.Status.Branch, nil
	}
	wt := &agentsv1alpha1.Worktree{}
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Worktree}, wt); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", fmt.Errorf("worktree %s: %w", s.Worktree, runnerapi.ErrNotFound)
		}
		return nil, "", fmt.Errorf("get worktree: %w", err)
	}
	if s.OwnerUID != "" && wt.UID != s.OwnerUID {
		return nil, "", fmt.Errorf("pod %s belongs to an earlier Worktree %s: %w", s.PodName, s.Worktree, runnerapi.ErrForbidden)
	}
	p := &agentsv1alpha1.Project{}
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: wt.Spec.ProjectRef.Name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", fmt.Errorf("project %s: %w", wt.Spec.ProjectRef.Name, runnerapi.ErrNotFound)
		}
		return nil, "", fmt.Errorf("get project: %w", err)
	}
	return p, "", nil
}
