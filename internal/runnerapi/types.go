// Package runnerapi is the channel between the runner (in the agent pod) and the manager: JSON
// over HTTP. The runner proves who it is with a projected service account token bound to its pod
// and to the Audience; the manager's Handler checks it with the TokenReview API, reads the pod
// named in the token, and maps it to its AgentSession (the pod's controller, checked by UID).
// A runner can read and report only for its own session. The Handler delegates what each call
// means to a Backend, which the AgentSession controller implements.
//
// Endpoints (all JSON, all under the token's authority):
//
//	GET  /runner/v1/task                  the task: prompt, agent settings, branch, resume state
//	POST /runner/v1/reports               a state change (monotonic sequence per pod; replay → 409)
//	GET  /runner/v1/messages?wait=30s     pending follow-up messages (long poll)
//	POST /runner/v1/messages/{id}/ack     the message was delivered to the agent
//	POST /runner/v1/pullrequest           open or update the session's pull request
//	POST /runner/v1/transcript            transcript entries (internal/transcript), in order
//	GET|POST /runner/v1/git/...           git smart HTTP to the session's repository (credentials
//	                                      added by the manager; pushes to the session's branch only)
package runnerapi

import (
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Audience is the audience of the runner's projected service account token. Tokens for any
// other audience (the API server's own, say) are refused, so a token stolen from the channel is
// useless against the API server and the reverse.
const Audience = "shepherd-runner"

// Paths of the endpoints.
const (
	PathTask        = "/runner/v1/task"
	PathReports     = "/runner/v1/reports"
	PathMessages    = "/runner/v1/messages"
	PathPullRequest = "/runner/v1/pullrequest"
	PathTranscript  = "/runner/v1/transcript"
	// PathGit prefixes git's smart HTTP to the caller's repository: the manager forwards it to
	// the forge with the Project's credentials, which never leave the manager.
	PathGit = "/runner/v1/git"
)

// AckPath is the endpoint that acknowledges message id.
func AckPath(id string) string { return PathMessages + "/" + id + "/ack" }

// Session identifies the caller: the AgentSession its pod belongs to (or, for a checkout pod,
// only its Worktree), and the pod.
type Session struct {
	// NamespacedName is the session; its Name is empty for a checkout pod's runner, which may
	// only use git.
	types.NamespacedName
	PodName  string    `json:"podName"`
	PodUID   types.UID `json:"podUID"`
	Worktree string    `json:"worktree,omitempty"`
	Project  string    `json:"project,omitempty"`
	// OwnerUID is the UID of the pod's controller (the AgentSession, or the Worktree of a
	// checkout pod): the Backend checks it against the object it reads, so that a pod left from
	// an earlier object of the same name gets nothing of the new one.
	OwnerUID types.UID `json:"ownerUID,omitempty"`
}

// IsSession reports whether the caller is a session's agent pod (not a checkout pod).
func (s Session) IsSession() bool { return s.Name != "" }

// GitRemote is where the manager forwards a caller's git: the repository and the credentials
// to add, and the one branch it may push ("" refuses pushes).
type GitRemote struct {
	URL    string
	Header http.Header
	Branch string
}

// Task is everything the runner needs to start or resume the agent.
type Task struct {
	// Agent settings in effect (the Project's defaults with the session's overrides applied).
	Agent AgentConfig `json:"agent"`
	// Prompt is the task in words (for an issue: the tracker's prompt).
	Prompt string `json:"prompt"`
	// Title of the pull request.
	Title string `json:"title,omitempty"`
	// Issue the task comes from, when it does.
	Issue *Issue `json:"issue,omitempty"`
	// Repository URL (no credentials).
	Repository string `json:"repository,omitempty"`
	// Branch the agent works on; BaseBranch the pull request targets.
	Branch     string `json:"branch"`
	BaseBranch string `json:"baseBranch"`
	// AgentSessionID is the agent's conversation id from an earlier pod, to resume it.
	AgentSessionID string `json:"agentSessionID,omitempty"`
	// LastActivity is the last activity state reported, so a restored runner knows whether a
	// turn was cut short.
	LastActivity agentsv1alpha1.ActivityState `json:"lastActivity,omitempty"`
	// Usage so far; the runner reports totals that continue from it.
	Usage Usage `json:"usage,omitempty"`
	// PullRequest already open for the session, if any.
	PullRequest *PullRequestResult `json:"pullRequest,omitempty"`
	// LastSequence is the highest report sequence accepted from this pod; the next report must
	// be greater.
	LastSequence uint64 `json:"lastSequence"`
}

// AgentConfig is the agent part of a Task.
type AgentConfig struct {
	Type              agentsv1alpha1.AgentType      `json:"type"`
	Model             string                        `json:"model,omitempty"`
	PermissionMode    agentsv1alpha1.PermissionMode `json:"permissionMode,omitempty"`
	ExtraArgs         []string                      `json:"extraArgs,omitempty"`
	ExtraInstructions string                        `json:"extraInstructions,omitempty"`
	// Custom is a custom agent's command and output format (type custom).
	Custom *CustomAgent `json:"custom,omitempty"`
}

// CustomAgent is what a custom agent runs and how it reports.
type CustomAgent struct {
	Command []string                    `json:"command"`
	Output  agentsv1alpha1.CustomOutput `json:"output,omitempty"`
}

// Issue is the tracker issue a task comes from.
type Issue struct {
	ID    string `json:"id"`
	URL   string `json:"url,omitempty"`
	Title string `json:"title,omitempty"`
}

// Report is a change the runner observed. Fields left nil did not change.
type Report struct {
	// Sequence increases with every report of a pod; a report at or below the last accepted one
	// is refused with 409 and changes nothing.
	Sequence uint64    `json:"sequence"`
	Time     time.Time `json:"time"`
	// Activity of the agent.
	Activity *ActivityReport `json:"activity,omitempty"`
	// Agent is the conversation id and model the agent reported.
	Agent *AgentReport `json:"agent,omitempty"`
	// Summary is the agent's latest turn result.
	Summary string `json:"summary,omitempty"`
	// Usage totals (cost and tokens) of the session so far.
	Usage *Usage `json:"usage,omitempty"`
	// Workspace facts after prepare or a turn.
	Workspace *WorkspaceReport `json:"workspace,omitempty"`
	// Push reports a pushed branch head.
	Push *PushReport `json:"push,omitempty"`
	// Loop counts repeated failures and turns without a change (the runaway limits).
	Loop *LoopReport `json:"loop,omitempty"`
}

// ActivityReport mirrors api ActivityStatus.
type ActivityReport struct {
	State            agentsv1alpha1.ActivityState `json:"state"`
	LastActivityTime time.Time                    `json:"lastActivityTime"`
	Question         string                       `json:"question,omitempty"`
	ExitCode         *int32                       `json:"exitCode,omitempty"`
	// Message is the last error, or the last lines of output on exit.
	Message string `json:"message,omitempty"`
}

// LoopReport counts what looks like an agent going round in circles.
type LoopReport struct {
	// RepeatedFailures is how many times in a row one tool call (the same tool and input) failed.
	RepeatedFailures int32 `json:"repeatedFailures,omitempty"`
	// FailingCall names that call ("Bash: go test ./..."), cut to 256 bytes.
	FailingCall string `json:"failingCall,omitempty"`
	// UnchangedTurns is how many turns in a row left the checkout as they found it.
	UnchangedTurns int32 `json:"unchangedTurns,omitempty"`
}

// AgentReport is the agent's own conversation id and model.
type AgentReport struct {
	SessionID string `json:"sessionID,omitempty"`
	Model     string `json:"model,omitempty"`
}

// Usage mirrors api UsageStatus: what the agent's CLI reported (cost and tokens), its turns, and
// what the runner's model proxy counted (Metered), which is authoritative.
type Usage struct {
	CostUSD         string `json:"costUSD,omitempty"`
	InputTokens     int64  `json:"inputTokens,omitempty"`
	OutputTokens    int64  `json:"outputTokens,omitempty"`
	CacheReadTokens int64  `json:"cacheReadTokens,omitempty"`
	Turns           int32  `json:"turns,omitempty"`
	// Metered is the model proxy's count of the session, totals since it began; nil when the
	// Project has no model proxy.
	Metered *Metered `json:"metered,omitempty"`
}

// Metered is the model proxy's count (modelproxy.Usage, the same JSON): disjoint token counts,
// requests, answers whose usage never arrived, and the split by model.
type Metered struct {
	Requests         int64                   `json:"requests,omitempty"`
	InputTokens      int64                   `json:"inputTokens,omitempty"`
	OutputTokens     int64                   `json:"outputTokens,omitempty"`
	CacheReadTokens  int64                   `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int64                   `json:"cacheWriteTokens,omitempty"`
	Unmetered        int64                   `json:"unmetered,omitempty"`
	ByModel          map[string]MeteredModel `json:"byModel,omitempty"`
}

// MeteredModel is one model's share of Metered.
type MeteredModel struct {
	Requests         int64 `json:"requests,omitempty"`
	InputTokens      int64 `json:"inputTokens,omitempty"`
	OutputTokens     int64 `json:"outputTokens,omitempty"`
	CacheReadTokens  int64 `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
}

// WorkspaceReport mirrors the facts of api WorktreeStatus.
type WorkspaceReport struct {
	Path            string `json:"path,omitempty"`
	Branch          string `json:"branch,omitempty"`
	Head            string `json:"head,omitempty"`
	Dirty           bool   `json:"dirty"`
	UnpushedCommits int32  `json:"unpushedCommits"`
	Restored        bool   `json:"restored,omitempty"`
	// FullFetch: the checkout step fetched the repository whole (a new mirror, or a clone with
	// none to borrow from); the manager labels the start cold by it.
	FullFetch bool         `json:"fullFetch,omitempty"`
	Setup     *SetupReport `json:"setup,omitempty"`
	// Missing is true when the checkout's directory is gone while the agent works in it (deleted
	// outside Shepherd); the other facts are then empty.
	Missing bool `json:"missing,omitempty"`
}

// SetupReport mirrors api SetupStatus.
type SetupReport struct {
	State         agentsv1alpha1.SetupState `json:"state"`
	FailedCommand string                    `json:"failedCommand,omitempty"`
	Error         string                    `json:"error,omitempty"`
}

// PushReport says the runner pushed Head to Branch.
type PushReport struct {
	Branch string `json:"branch"`
	Head   string `json:"head"`
}

// Message is a follow-up for the agent.
type Message struct {
	ID     string                       `json:"id"`
	Text   string                       `json:"text"`
	Source agentsv1alpha1.MessageSource `json:"source,omitempty"`
}

// MessageList is the answer of the messages endpoint, oldest first.
type MessageList struct {
	Messages []Message `json:"messages"`
}

// PullRequestRequest asks the manager to open the session's pull request, or update its title
// and body when it is open.
type PullRequestRequest struct {
	Branch string `json:"branch"`
	Base   string `json:"base"`
	Head   string `json:"head"`
	Title  string `json:"title"`
	Body   string `json:"body"`
}

// PullRequestResult is the session's pull request.
type PullRequestResult struct {
	Number  int64  `json:"number"`
	URL     string `json:"url,omitempty"`
	Created bool   `json:"created,omitempty"`
}

// ErrorBody is the JSON body of every 4xx and 5xx answer.
type ErrorBody struct {
	Error string `json:"error"`
	// LastSequence accompanies 409 on reports: the highest sequence accepted from this pod.
	LastSequence uint64 `json:"lastSequence,omitempty"`
}
