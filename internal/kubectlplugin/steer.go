package kubectlplugin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/tracker"
)

// maxMessages is the CRD's bound on spec.messages.
const maxMessages = 100

// idRE is spec.messages[].id's pattern (the CRD's).
var idRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// session reads one session and its typed form.
func (e *env) session(ctx context.Context, name string) (*unstructured.Unstructured, *agentsv1alpha1.AgentSession, error) {
	if err := e.requireNamespace(); err != nil {
		return nil, nil, err
	}
	u, err := e.sessions(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	s := &agentsv1alpha1.AgentSession{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, s); err != nil {
		return nil, nil, err
	}
	return u, s, nil
}

// whoAmI is the user's name as the API server authenticated it (a SelfSubjectReview), for a
// message's from; empty when the server does not say.
func (e *env) whoAmI(ctx context.Context) string {
	r, err := e.kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return ""
	}
	return r.Status.UserInfo.Username
}

type sendOptions struct {
	id, from string
}

func (m *sendOptions) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&m.id, "id", "", "The message's id (lowercase letters, digits, '-'); default a new one. The same id twice is one message.")
	cmd.Flags().StringVar(&m.from, "from", "", "Who wrote it, for the record; default your user name as the API server knows it.")
}

// send appends one message; a message with the same id already there is left as it is (a retry
// sends nothing twice).
func (m *sendOptions) send(ctx context.Context, e *env, name, text string) (string, error) {
	if strings.TrimSpace(text) == "" {
		return "", fmt.Errorf("the message is empty")
	}
	live, s, err := e.session(ctx, name)
	if err != nil {
		return "", err
	}
	id := m.id
	if id == "" {
		b := make([]byte, 4)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		id = "m-" + e.now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
	}
	if len(id) > 63 || !idRE.MatchString(id) {
		return "", fmt.Errorf("--id %q: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit", id)
	}
	for _, msg := range s.Spec.Messages {
		if msg.ID == id {
			if msg.Text != text {
				return "", fmt.Errorf("session %s already has a message %s with another text: pick another --id", name, id)
			}
			return id, nil
		}
	}
	if len(s.Spec.Messages) >= maxMessages {
		return "", fmt.Errorf("session %s holds %d messages, the most it takes: start a new session for more", name, maxMessages)
	}
	from := m.from
	if from == "" {
		from = e.whoAmI(ctx)
	}
	msg := map[string]any{"id": id, "text": text}
	if from != "" {
		msg["from"] = truncate(from, 253)
	}
	// A message is an item of its own (spec.messages is a map keyed by id): nobody else owns it,
	// so there is nothing to force.
	return id, e.apply(ctx, live, change{message: msg}, false)
}

func newSend(o *Options) *cobra.Command {
	m := &sendOptions{}
	cmd := &cobra.Command{
		Use:     "send NAME TEXT",
		Short:   "Send the agent a message: delivered once, as the next turn of its conversation",
		Example: `  kubectl shepherd send widgets-42 "Also update the changelog."`,
		Args:    cobra.ExactArgs(2),
		RunE: run(o, func(ctx context.Context, e *env, args []string) error {
			id, err := m.send(ctx, e, args[0], args[1])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(e.out, "message %s queued for %s\n", id, args[0])
			return err
		}),
	}
	m.flags(cmd)
	return cmd
}

func newAnswer(o *Options) *cobra.Command {
	m := &sendOptions{}
	cmd := &cobra.Command{
		Use:     "answer NAME TEXT",
		Short:   "Answer the question a NeedsInput session asks",
		Example: `  kubectl shepherd answer widgets-42 "Use the v2 API."`,
		Args:    cobra.ExactArgs(2),
		RunE: run(o, func(ctx context.Context, e *env, args []string) error {
			_, s, err := e.session(ctx, args[0])
			if err != nil {
				return err
			}
			q := ""
			if s.Status.Activity != nil {
				q = s.Status.Activity.Question
			}
			if q == "" && s.Status.Phase != agentsv1alpha1.PhaseNeedsInput {
				return fmt.Errorf("session %s asks nothing (phase %s): use kubectl shepherd send", args[0], orDash(string(s.Status.Phase)))
			}
			id, err := m.send(ctx, e, args[0], args[1])
			if err != nil {
				return err
			}
			if q != "" {
				fmt.Fprintf(e.out, "question: %s\n", oneLine(q))
			}
			_, err = fmt.Fprintf(e.out, "answer %s queued for %s\n", id, args[0])
			return err
		}),
	}
	m.flags(cmd)
	return cmd
}

func newApprove(o *Options) *cobra.Command {
	var head string
	var force bool
	cmd := &cobra.Command{
		Use:   "approve NAME",
		Short: "Approve the pull request's current head: Shepherd merges that head once its checks pass",
		Long: `approve annotates the session with the head it approves (` + agentsv1alpha1.ApprovedHeadAnnotation + `).
Shepherd merges that head, and only it, once the pull request is mergeable and its checks pass;
a push after the approval needs a new one.`,
		Args: cobra.ExactArgs(1),
		RunE: run(o, func(ctx context.Context, e *env, args []string) error {
			msg, err := e.approve(ctx, args[0], head, force)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(e.out, msg)
			return err
		}),
	}
	cmd.Flags().StringVar(&head, "head", "", "The head (a SHA or its prefix) you reviewed; refused if the pull request moved on.")
	cmd.Flags().BoolVar(&force, "force", false, "Take the annotation over from another field manager.")
	return cmd
}

func newSetState(o *Options, verb string, state agentsv1alpha1.SessionState) *cobra.Command {
	var force bool
	short := map[string]string{
		"stop":    "Stop a session: the pod goes, the worktree and the conversation stay",
		"restore": "Run a stopped session again: the checkout is restored and the conversation resumed",
	}[verb]
	cmd := &cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: run(o, func(ctx context.Context, e *env, args []string) error {
			msg, err := e.setState(ctx, args[0], state, force)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(e.out, msg)
			return err
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "Take spec.state over from another field manager (a GitOps tool sets it back on its next sync).")
	return cmd
}

// approve approves the pull request's head (head, when set, must prefix it).
func (e *env) approve(ctx context.Context, name, head string, force bool) (string, error) {
	live, s, err := e.session(ctx, name)
	if err != nil {
		return "", err
	}
	pr := s.Status.PullRequest
	if pr == nil || pr.HeadSHA == "" {
		return "", fmt.Errorf("session %s has no pull request to approve yet (phase %s)", name, orDash(string(s.Status.Phase)))
	}
	if pr.State != "" && pr.State != agentsv1alpha1.PullRequestOpen {
		return "", fmt.Errorf("session %s's pull request is %s, not open", name, pr.State)
	}
	if head != "" && !strings.HasPrefix(pr.HeadSHA, head) {
		return "", fmt.Errorf("the pull request's head is now %s, not %s: review it again", short(pr.HeadSHA), head)
	}
	if err := e.apply(ctx, live, change{annotations: map[string]string{agentsv1alpha1.ApprovedHeadAnnotation: pr.HeadSHA}}, force); err != nil {
		return "", err
	}
	return fmt.Sprintf("approved head %s of %s; Shepherd merges it once its checks pass", short(pr.HeadSHA), orDash(pr.URL)), nil
}

// setState sets spec.state.
func (e *env) setState(ctx context.Context, name string, state agentsv1alpha1.SessionState, force bool) (string, error) {
	live, s, err := e.session(ctx, name)
	if err != nil {
		return "", err
	}
	if s.Spec.State == state || (s.Spec.State == "" && state == agentsv1alpha1.SessionRunning) {
		return fmt.Sprintf("session %s is already %s", name, state), nil
	}
	if err := e.apply(ctx, live, change{state: string(state)}, force); err != nil {
		return "", err
	}
	return fmt.Sprintf("session %s: spec.state %s", name, state), nil
}

type spawnOptions struct {
	issue, prompt, name, title, agent string
}

func newSpawn(o *Options) *cobra.Command {
	p := &spawnOptions{}
	cmd := &cobra.Command{
		Use:   "spawn PROJECT (--issue N | --prompt TEXT)",
		Short: "Start a session on a Project's issue or on a prompt",
		Example: `  kubectl shepherd spawn widgets --issue 42
  kubectl shepherd spawn widgets --prompt "Add a --verbose flag" --agent codex`,
		Args: cobra.ExactArgs(1),
		RunE: run(o, func(ctx context.Context, e *env, args []string) error { return p.run(ctx, e, args[0]) }),
	}
	cmd.Flags().StringVar(&p.issue, "issue", "", "The tracker issue (42, #42 or ENG-123).")
	cmd.Flags().StringVar(&p.prompt, "prompt", "", "The task in words.")
	cmd.Flags().StringVar(&p.name, "name", "", "The session's name; default PROJECT-ISSUE, or PROJECT-<hash of the prompt>, so the same task twice is one session.")
	cmd.Flags().StringVar(&p.title, "title", "", "The pull request's title for a prompt (default its first line).")
	cmd.Flags().StringVar(&p.agent, "agent", "", "The agent type (claude-code, codex, opencode, aider); default the Project's.")
	return cmd
}

func (p *spawnOptions) run(ctx context.Context, e *env, project string) error {
	if err := e.requireNamespace(); err != nil {
		return err
	}
	if (p.issue == "") == (p.prompt == "") {
		return fmt.Errorf("pass exactly one of --issue or --prompt")
	}
	if _, err := e.dyn.Resource(projectsGVR).Namespace(e.ns).Get(ctx, project, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("no Project %s in namespace %s", project, e.ns)
		}
		return err
	}
	name := p.name
	if name == "" {
		if p.issue != "" {
			name = tracker.SessionName(project, p.issue)
		} else {
			sum := sha256.Sum256([]byte(p.prompt))
			name = project + "-" + hex.EncodeToString(sum[:4])
		}
	}
	created, err := e.createSession(ctx, name, project, map[string]string{"issue": p.issue, "prompt": p.prompt, "title": p.title}, p.agent)
	if err != nil {
		return err
	}
	if !created {
		return fmt.Errorf("agentsession %s exists already: it works on this task, or pass --name", name)
	}
	_, err = fmt.Fprintf(e.out, "agentsession.agents.shepherd.dev/%s created\n", name)
	return err
}

// createSession applies a new AgentSession of project with the spec's non-empty fields (issue,
// prompt, title) and agent type; false when a session of that name exists (left as it is).
func (e *env) createSession(ctx context.Context, name, project string, fields map[string]string, agent string) (bool, error) {
	if _, err := e.sessions(e.ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		return false, nil
	} else if !apierrors.IsNotFound(err) {
		return false, err
	}
	spec := map[string]any{"projectRef": map[string]any{"name": project}}
	for k, v := range fields {
		if v != "" {
			spec[k] = v
		}
	}
	if agent != "" {
		spec["agent"] = map[string]any{"type": agent}
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": sessionGVK.GroupVersion().String(), "kind": sessionGVK.Kind,
		"metadata": map[string]any{"name": name, "namespace": e.ns}, "spec": spec}}
	if _, err := e.sessions(e.ns).Apply(ctx, name, obj, metav1.ApplyOptions{FieldManager: FieldManager}); err != nil {
		return false, err
	}
	return true, nil
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}
