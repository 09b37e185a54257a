package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apiserver/pkg/authentication/user"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/kubectlplugin"
	"github.com/shepherd-dev/shepherd/internal/transcript"
)

//go:embed templates/*.html templates/style.css templates/app.js
var assets embed.FS

// The page's style and script are inline (no asset routes to authorise), allowed by their
// hashes in the Content-Security-Policy: nothing else runs, whatever a page shows.
var (
	styleCSS = mustRead("templates/style.css")
	appJS    = mustRead("templates/app.js")
	csp      = fmt.Sprintf("default-src 'none'; connect-src 'self'; img-src 'self' data:; style-src '%s'; script-src '%s'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
		hashOf(styleCSS), hashOf(appJS))
)

func mustRead(name string) string {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"kind":       func(e transcript.Entry) string { return strings.ToLower(string(e.Kind)) },
	"printable":  transcript.Printable,
	"usage":      transcript.FormatUsage,
	"clock":      func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"phaseClass": func(p string) string { return "phase-" + strings.ToLower(p) },
	"style":      func() template.CSS { return template.CSS(styleCSS) }, //nolint:gosec // our own embedded file, hashed in the CSP
	"script":     func() template.JS { return template.JS(appJS) },      //nolint:gosec // our own embedded file, hashed in the CSP
}).ParseFS(assets, "templates/*.html"))

// Columns of the board, in the order a session moves through them; a phase not listed shows in
// the last column.
var columns = [][]agentsv1alpha1.SessionPhase{
	{agentsv1alpha1.PhaseQueued, agentsv1alpha1.PhaseSpawning},
	{agentsv1alpha1.PhaseWorking},
	{agentsv1alpha1.PhaseNeedsInput, agentsv1alpha1.PhaseStuck, agentsv1alpha1.PhaseErrored},
	{agentsv1alpha1.PhasePROpen, agentsv1alpha1.PhaseCIFailed, agentsv1alpha1.PhaseReviewPending, agentsv1alpha1.PhaseChangesRequested},
	{agentsv1alpha1.PhaseApproved, agentsv1alpha1.PhaseMergeable},
	{agentsv1alpha1.PhaseMerged, agentsv1alpha1.PhaseDone, agentsv1alpha1.PhaseStopped},
}

var columnTitles = []string{"Starting", "Working", "Needs you", "Pull request", "Ready to merge", "Finished"}

// card is one session on the board.
type card struct {
	Namespace, Name, Project, Agent, Phase, Cost, Link, Question string
	PR                                                           int64
	PRURL, Checks, Review                                        string
	Age                                                          string
}

type column struct {
	Title string
	Cards []card
}

type boardPage struct {
	User                                 string
	Columns                              []column
	Projects, Agents, Phases, Namespaces []string
	Project, Agent, Phase, Namespace     string
	Hidden                               int
	Truncated                            bool
	Base                                 string
}

// Board is the board's path. The API server forwards the group's requests under Prefix;
// kubectl proxy and `kubectl shepherd dashboard` keep the path.
const Board = Prefix + "/dashboard"

// SessionPath is a session's path in the aggregated API, without the subresource.
func SessionPath(ns, name string) string {
	return Prefix + "/namespaces/" + url.PathEscape(ns) + "/agentsessions/" + url.PathEscape(name)
}

// SessionLink is the dashboard page of a session under root, the URL people reach the API
// server's paths at (`kubectl shepherd dashboard`'s http://127.0.0.1:8001, say): the deep link
// notifications carry.
func SessionLink(root, ns, name string) string {
	return strings.TrimRight(root, "/") + SessionPath(ns, name) + "/dashboard"
}

// board shows the sessions the user may list, as columns by phase, filtered by the query's
// project, agent, phase and namespace.
func (s *Server) board(w http.ResponseWriter, r *http.Request, u user.Info) {
	ctx := r.Context()
	var list agentsv1alpha1.AgentSessionList
	if err := s.o.Sessions.List(ctx, &list); err != nil {
		s.o.Log.Error(err, "List sessions for the board")
		status(w, http.StatusInternalServerError, "InternalError", "listing sessions failed")
		return
	}
	all, err := s.allowed(ctx, u, "list", "", "")
	if err != nil {
		status(w, http.StatusInternalServerError, "InternalError", "authorization failed")
		return
	}
	readable := map[string]bool{}
	page := boardPage{User: u.GetName(), Base: Board}
	if !all {
		var nss []string
		seen := map[string]bool{}
		for i := range list.Items {
			if ns := list.Items[i].Namespace; !seen[ns] {
				seen[ns] = true
				nss = append(nss, ns)
			}
		}
		sort.Strings(nss)
		if len(nss) > maxBoardNamespaces {
			nss, page.Truncated = nss[:maxBoardNamespaces], true
		}
		for _, ns := range nss {
			ok, err := s.allowed(ctx, u, "list", ns, "")
			if err != nil {
				status(w, http.StatusInternalServerError, "InternalError", "authorization failed")
				return
			}
			readable[ns] = ok
		}
	}
	q := r.URL.Query()
	page.Project, page.Agent, page.Phase, page.Namespace = q.Get("project"), q.Get("agent"), q.Get("phase"), q.Get("namespace")
	page.Columns = make([]column, len(columns))
	for i := range columns {
		page.Columns[i].Title = columnTitles[i]
	}
	sets := map[string]map[string]bool{"project": {}, "agent": {}, "phase": {}, "namespace": {}}
	now := s.o.Now()
	items := list.Items
	sort.Slice(items, func(i, j int) bool {
		return items[i].CreationTimestamp.After(items[j].CreationTimestamp.Time)
	})
	for i := range items {
		sess := &items[i]
		if !all && !readable[sess.Namespace] {
			continue
		}
		c := cardOf(sess, now)
		sets["project"][c.Project], sets["agent"][c.Agent], sets["phase"][c.Phase], sets["namespace"][c.Namespace] = true, true, true, true
		if (page.Project != "" && c.Project != page.Project) || (page.Agent != "" && c.Agent != page.Agent) ||
			(page.Phase != "" && c.Phase != page.Phase) || (page.Namespace != "" && c.Namespace != page.Namespace) {
			page.Hidden++
			continue
		}
		col := len(columns) - 1
		for j, phases := range columns {
			if slices.Contains(phases, sess.Status.Phase) {
				col = j
			}
		}
		page.Columns[col].Cards = append(page.Columns[col].Cards, c)
	}
	keys := func(m map[string]bool) []string {
		var out []string
		for k := range m {
			if k != "" {
				out = append(out, k)
			}
		}
		sort.Strings(out)
		return out
	}
	page.Projects, page.Agents, page.Phases, page.Namespaces = keys(sets["project"]), keys(sets["agent"]), keys(sets["phase"]), keys(sets["namespace"])
	s.render(w, http.StatusOK, "board.html", page)
}

func cardOf(sess *agentsv1alpha1.AgentSession, now time.Time) card {
	c := card{Namespace: sess.Namespace, Name: sess.Name, Project: sess.Spec.ProjectRef.Name, Phase: string(sess.Status.Phase),
		Link: SessionLink("", sess.Namespace, sess.Name), Age: age(sess.CreationTimestamp.Time, now),
		Agent: string(kubectlplugin.AgentType(sess)), Cost: kubectlplugin.Cost(sess)}
	if c.Phase == "" {
		c.Phase = "Pending"
	}
	if pr := sess.Status.PullRequest; pr != nil {
		c.PR, c.PRURL, c.Checks, c.Review = pr.Number, safeURL(pr.URL), string(pr.Checks), string(pr.ReviewDecision)
	}
	if a := sess.Status.Activity; a != nil {
		c.Question = a.Question
	}
	return c
}

// safeURL keeps http(s) links only: a forge URL in status is data, and a javascript: URL would
// run in the dashboard's origin.
func safeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return ""
	}
	return u.String()
}

// age is kubectl's way of saying how old a thing is.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t))
}

type sessionView struct {
	card
	User, Board, Stream, Action, CSRF, MessageID string
	Summary, Branch, Activity, Message           string
	HeadSHA, ChecksSummary, Usage                string
	CanSteer, Stopped, CanApprove                bool
	// Task is the AgentTask the session is an attempt of; CanPick when it may be picked now
	// (the task has not chosen, the attempt has a pull request).
	Task       string
	CanPick    bool
	Entries    []transcript.Entry
	Dropped    bool
	Last       uint64
	Reactions  []agentsv1alpha1.ReactionStatus
	Conditions []condition
	Messages   []agentsv1alpha1.Message
}

type condition struct{ Type, Status, Reason, Message string }

// sessionPage shows one session: status, pull request, reactions, cost, the transcript (live
// when JavaScript runs), and the forms that steer it when the user may.
func (s *Server) sessionPage(w http.ResponseWriter, r *http.Request, u user.Info) {
	sess, ok := s.session(w, r, u, "get")
	if !ok {
		return
	}
	canSteer, err := s.allowed(r.Context(), u, "patch", sess.Namespace, sess.Name)
	if err != nil {
		status(w, http.StatusInternalServerError, "InternalError", "authorization failed")
		return
	}
	key := types.NamespacedName{Namespace: sess.Namespace, Name: sess.Name}
	es, dropped, _ := s.o.Transcripts.Read(key, 0, 0)
	v := sessionView{card: cardOf(sess, s.o.Now()), User: u.GetName(), Board: Board,
		Action: SessionPath(sess.Namespace, sess.Name) + "/steer", CanSteer: canSteer, Entries: es, Dropped: dropped,
		Summary: sess.Status.Summary, Branch: sess.Status.Branch, Reactions: sess.Status.Reactions, Messages: sess.Spec.Messages,
		Stopped: sess.Spec.State == agentsv1alpha1.SessionStopped}
	v.Stream = SessionPath(sess.Namespace, sess.Name) + "/transcript"
	if len(es) > 0 {
		v.Last = es[len(es)-1].Seq
	}
	if v.Task = taskOf(sess); v.Task != "" && canSteer && sess.Status.PullRequest != nil && sess.Spec.SupersededBy == nil &&
		(sess.Spec.PullRequest == nil || sess.Spec.PullRequest.Draft == nil || *sess.Spec.PullRequest.Draft) {
		v.CanPick, _ = s.may(r.Context(), u, "patch", "agenttasks", sess.Namespace, v.Task)
	}
	if canSteer {
		v.CSRF = s.csrf(u, sess.Namespace, sess.Name)
		// The message's id is the page's: the same form sent twice (a double click, a reload)
		// is one message.
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		v.MessageID = "m-" + s.o.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
	}
	if a := sess.Status.Activity; a != nil {
		v.Activity, v.Message = string(a.State), a.Message
	}
	if pr := sess.Status.PullRequest; pr != nil {
		v.HeadSHA, v.ChecksSummary = pr.HeadSHA, pr.ChecksSummary
		v.CanApprove = canSteer && pr.HeadSHA != "" && (pr.State == "" || pr.State == agentsv1alpha1.PullRequestOpen)
	}
	if us := sess.Status.Usage; us != nil {
		v.Usage = fmt.Sprintf("%d turns, %d tokens in, %d out", us.Turns, us.InputTokens, us.OutputTokens)
	}
	for _, c := range sess.Status.Conditions {
		v.Conditions = append(v.Conditions, condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message})
	}
	s.render(w, http.StatusOK, "session.html", v)
}

// csrf is the form token of u for one session: a page of another site cannot read it, so it
// cannot make the user's browser post a form here (through kubectl proxy, which adds the
// user's credentials to whatever the browser sends).
func (s *Server) csrf(u user.Info, ns, name string) string {
	m := hmac.New(sha256.New, s.o.CSRFKey)
	fmt.Fprintf(m, "%s\x00%s\x00%s\x00%s", u.GetName(), u.GetUID(), ns, name)
	return hex.EncodeToString(m.Sum(nil))
}

// maxForm bounds a posted form: a message is at most the CRD's 64 KiB, plus the other fields.
const maxForm = 80 << 10

// act runs a form's action (send, answer, approve, stop, restore) as the user may (patch on the
// session), then sends the browser back to the session's page with what happened.
func (s *Server) act(w http.ResponseWriter, r *http.Request, u user.Info) {
	sess, ok := s.session(w, r, u, "patch")
	if !ok {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		status(w, http.StatusBadRequest, "BadRequest", "bad form: "+err.Error())
		return
	}
	want := s.csrf(u, sess.Namespace, sess.Name)
	if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(want)) {
		status(w, http.StatusForbidden, "Forbidden", "the form's token is not this page's: reload the session's page and try again")
		return
	}
	ctx := r.Context()
	var msg string
	var err error
	action := r.PostForm.Get("action")
	switch action {
	case "send", "answer":
		msg, err = s.o.Steer.Send(ctx, sess.Namespace, sess.Name, r.PostForm.Get("id"), r.PostForm.Get("text"), u.GetName())
		if err == nil {
			msg = "message " + msg + " queued: the agent gets it as its next turn"
		}
	case "approve":
		msg, err = s.o.Steer.Approve(ctx, sess.Namespace, sess.Name, r.PostForm.Get("head"))
	case "stop":
		msg, err = s.o.Steer.SetState(ctx, sess.Namespace, sess.Name, agentsv1alpha1.SessionStopped)
	case "restore":
		msg, err = s.o.Steer.SetState(ctx, sess.Namespace, sess.Name, agentsv1alpha1.SessionRunning)
	case "pick":
		// The session is an attempt of an AgentTask: picking it writes the task, so the user
		// needs patch on the task too (not only on this session).
		task := taskOf(sess)
		if task == "" {
			status(w, http.StatusBadRequest, "BadRequest", "session "+sess.Name+" is not an attempt of an AgentTask")
			return
		}
		ok, aerr := s.may(ctx, u, "patch", "agenttasks", sess.Namespace, task)
		if aerr != nil {
			s.o.Log.Error(aerr, "Authorize UI request", "user", u.GetName())
			status(w, http.StatusInternalServerError, "InternalError", "authorization failed")
			return
		}
		if !ok {
			status(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("%s may not patch agenttasks.%s %q in namespace %q",
				u.GetName(), agentsv1alpha1.GroupVersion.Group, task, sess.Namespace))
			return
		}
		msg, err = s.o.Steer.Pick(ctx, sess.Namespace, task, sess.Name)
	default:
		status(w, http.StatusNotFound, "NotFound", "no action "+action)
		return
	}
	// The API server's proxy passes no redirect from an aggregated API: the answer is a page that
	// says what happened and goes back to the session's page.
	back := SessionLink("", sess.Namespace, sess.Name)
	res := resultPage{Back: back, Board: Board, Name: sess.Name}
	if err != nil {
		s.o.Log.V(1).Info("Dashboard action refused", "user", u.GetName(), "session", sess.Namespace+"/"+sess.Name, "error", err.Error())
		if apierrors.IsInternalError(err) || apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) {
			s.o.Log.Error(err, "Dashboard action failed", "session", sess.Namespace+"/"+sess.Name)
		}
		res.Error = err.Error()
		s.render(w, http.StatusConflict, "result.html", res)
		return
	}
	s.o.Log.Info("Dashboard action", "user", u.GetName(), "session", sess.Namespace+"/"+sess.Name, "action", action)
	res.Done = msg
	s.render(w, http.StatusOK, "result.html", res)
}

// taskOf is the AgentTask a session is an attempt of (its controller), or "".
func taskOf(sess *agentsv1alpha1.AgentSession) string {
	if ref := metav1.GetControllerOf(sess); ref != nil && ref.Kind == "AgentTask" && ref.APIVersion == agentsv1alpha1.GroupVersion.String() {
		return ref.Name
	}
	return ""
}

// resultPage is the answer to a form.
type resultPage struct {
	Back, Board, Name, Done, Error string
}

func (s *Server) render(w http.ResponseWriter, code int, name string, data any) {
	var b strings.Builder
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		s.o.Log.Error(err, "Render dashboard page", "page", name)
		status(w, http.StatusInternalServerError, "InternalError", "rendering the page failed")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", csp)
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}
