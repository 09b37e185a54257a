// Package ui is how people watch and steer sessions: the transcript API and the web dashboard,
// served by the manager as an aggregated API (group ui.agents.shepherd.dev) behind the
// Kubernetes API server.
//
// Why an aggregated API (docs/architecture.md, "Watching and steering"): every kubeconfig that
// reaches the API server reaches it too, whatever it authenticates with (client certificates,
// tokens, OIDC, exec plugins); the API server authenticates the user and tells this server who
// it is over mutual TLS (the front-proxy headers); nothing new faces the internet; and a
// browser gets it through `kubectl shepherd dashboard` (or `kubectl proxy`) with the user's own
// credentials. This server then asks the API server what the user may do
// (SubjectAccessReview): reading a session's transcript needs get on the AgentSession, steering
// it needs patch, the board lists only namespaces where the user may list sessions.
package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/kubectlplugin"
	"github.com/shepherd-dev/shepherd/internal/transcript"
)

// Group and Version of the aggregated API; APIServiceName is its APIService.
const (
	Group          = "ui.agents.shepherd.dev"
	Version        = "v1alpha1"
	APIServiceName = Version + "." + Group
	// Prefix is where the API server sends this group's requests.
	Prefix = "/apis/" + Group + "/" + Version
)

// Bounds of what a reader can make the server do.
const (
	// MaxFollow is how long one follow stream lasts; the client reconnects with since.
	MaxFollow = 30 * time.Minute
	// heartbeat keeps a quiet stream open through proxies.
	heartbeat = 15 * time.Second
	// maxStreams bounds the follow streams open at once (each holds a goroutine and a
	// connection through the API server).
	maxStreams = 2000
	// maxBoardNamespaces bounds the per-namespace access reviews of one board.
	maxBoardNamespaces = 200
)

// Options configure NewServer.
type Options struct {
	// Sessions reads AgentSessions and Projects (the manager's cache).
	Sessions client.Reader
	// Transcripts is the manager's transcript windows.
	Transcripts *transcript.Store
	// Authenticator knows who a request is from (the API server's front-proxy headers).
	Authenticator authenticator.Request
	// Authorizer decides what a user may do (SubjectAccessReviews, cached).
	Authorizer authorizer.Authorizer
	// Issues lists Projects' tracker issues (the plugin's batch); nil answers 503.
	Issues IssueLister
	// Steer makes the dashboard's writes.
	Steer *kubectlplugin.Steerer
	// CSRFKey signs the dashboard's form tokens (random per process is fine: a token lives as
	// long as the page that holds it).
	CSRFKey []byte
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	Log logr.Logger
}

// Server serves the aggregated API.
type Server struct {
	o       Options
	mux     *http.ServeMux
	streams chan struct{}
	// issueCache answers repeated issue queries and bounds those in flight.
	issueCache *issueCache
}

// NewServer returns the aggregated API's handler.
func NewServer(o Options) (*Server, error) {
	if o.Sessions == nil || o.Transcripts == nil || o.Authenticator == nil || o.Authorizer == nil || o.Steer == nil || len(o.CSRFKey) < 16 {
		return nil, errors.New("ui: Sessions, Transcripts, Authenticator, Authorizer, Steer and a CSRFKey of 16 bytes or more are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Server{o: o, mux: http.NewServeMux(), streams: make(chan struct{}, maxStreams), issueCache: newIssueCache()}
	s.mux.HandleFunc("GET /apis", s.apiGroupList)
	s.mux.HandleFunc("GET /apis/"+Group, s.apiGroup)
	s.mux.HandleFunc("GET "+Prefix, s.apiResources)
	// The paths are resource paths, so that the API server's own RBAC check (before it forwards
	// a request) reads as what the request means: get agentsessions/transcript and
	// agentsessions/dashboard, create agentsessions/steer, list dashboard (the board), get
	// projects/issues.
	session := Prefix + "/namespaces/{ns}/agentsessions/{name}"
	s.mux.HandleFunc("GET "+session+"/transcript", s.authed(s.transcript))
	s.mux.HandleFunc("GET "+session+"/dashboard", s.authed(s.sessionPage))
	s.mux.HandleFunc("POST "+session+"/steer", s.authed(s.act))
	s.mux.HandleFunc("GET "+Prefix+"/dashboard", s.authed(s.board))
	s.mux.HandleFunc("GET "+Prefix+"/namespaces/{ns}/projects/{name}/issues", s.authed(s.issues))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Pages and JSON are the user's: never cached by a proxy, never framed by another site.
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	s.mux.ServeHTTP(w, r)
}

type userHandler func(w http.ResponseWriter, r *http.Request, u user.Info)

// authed authenticates the request (the API server's front-proxy identity) or answers 401.
func (s *Server) authed(next userHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		res, ok, err := s.o.Authenticator.AuthenticateRequest(r)
		if !ok {
			s.o.Log.V(1).Info("UI request not authenticated", "remote", r.RemoteAddr, "reason", fmt.Sprint(err))
			status(w, http.StatusUnauthorized, "Unauthorized", "reach this API through the Kubernetes API server (kubectl shepherd, kubectl proxy)")
			return
		}
		next(w, r, res.User)
	}
}

// allowed asks whether u may verb the sessions of ns (name "" for all of them).
func (s *Server) allowed(ctx context.Context, u user.Info, verb, ns, name string) (bool, error) {
	return s.may(ctx, u, verb, "agentsessions", ns, name)
}

// may asks whether u may verb the agents.shepherd.dev resource named in ns.
func (s *Server) may(ctx context.Context, u user.Info, verb, resource, ns, name string) (bool, error) {
	d, _, err := s.o.Authorizer.Authorize(ctx, authorizer.AttributesRecord{User: u, Verb: verb, Namespace: ns, Name: name,
		APIGroup: agentsv1alpha1.GroupVersion.Group, APIVersion: agentsv1alpha1.GroupVersion.Version, Resource: resource,
		ResourceRequest: true})
	if err != nil {
		return false, err
	}
	return d == authorizer.DecisionAllow, nil
}

// session authorises verb on the session named in the path and reads it. It answers the
// request itself (403, 404) when it returns false. A user who may not read a session learns
// nothing of it, not even whether it exists.
func (s *Server) session(w http.ResponseWriter, r *http.Request, u user.Info, verb string) (*agentsv1alpha1.AgentSession, bool) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	ok, err := s.allowed(r.Context(), u, verb, ns, name)
	if err != nil {
		s.o.Log.Error(err, "Authorize UI request", "user", u.GetName())
		status(w, http.StatusInternalServerError, "InternalError", "authorization failed")
		return nil, false
	}
	if !ok {
		status(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("%s may not %s agentsessions.%s %q in namespace %q",
			u.GetName(), verb, agentsv1alpha1.GroupVersion.Group, name, ns))
		return nil, false
	}
	sess := &agentsv1alpha1.AgentSession{}
	if err := s.o.Sessions.Get(r.Context(), types.NamespacedName{Namespace: ns, Name: name}, sess); err != nil {
		if apierrors.IsNotFound(err) {
			status(w, http.StatusNotFound, "NotFound", fmt.Sprintf("agentsessions.%s %q not found", agentsv1alpha1.GroupVersion.Group, name))
			return nil, false
		}
		s.o.Log.Error(err, "Read session for the UI", "session", ns+"/"+name)
		status(w, http.StatusInternalServerError, "InternalError", "reading the session failed")
		return nil, false
	}
	return sess, true
}

// TranscriptList is the answer of the transcript endpoint when it does not follow.
type TranscriptList struct {
	metav1.TypeMeta `json:",inline"`
	// Entries after since, oldest first.
	Entries []transcript.Entry `json:"entries"`
	// Dropped says entries after since are no longer in the manager's window (the session's
	// volume has the whole transcript).
	Dropped bool `json:"dropped,omitempty"`
	// Last is the highest Seq returned (or since, when none): pass it as since to continue.
	Last uint64 `json:"last"`
}

// transcript answers GET .../agentsessions/{name}/transcript?since=N&limit=N&follow=true.
// Following streams newline-delimited JSON entries (or server-sent events to a browser that
// asks for text/event-stream) until the client goes, the session is deleted, or MaxFollow.
func (s *Server) transcript(w http.ResponseWriter, r *http.Request, u user.Info) {
	sess, ok := s.session(w, r, u, "get")
	if !ok {
		return
	}
	q := r.URL.Query()
	rawSince := q.Get("since")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		// A browser's EventSource reconnecting says where it was.
		rawSince = id
	}
	since, err := parseUint(rawSince)
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", "since: "+err.Error())
		return
	}
	limit, err := parseUint(q.Get("limit"))
	if err != nil || limit > transcript.DefaultMaxEntries {
		status(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("limit must be a number from 0 to %d", transcript.DefaultMaxEntries))
		return
	}
	key := types.NamespacedName{Namespace: sess.Namespace, Name: sess.Name}
	if q.Get("follow") != "true" {
		es, dropped, _ := s.o.Transcripts.Read(key, since, int(limit))
		last := since
		if len(es) > 0 {
			last = es[len(es)-1].Seq
		}
		writeJSON(w, http.StatusOK, TranscriptList{TypeMeta: metav1.TypeMeta{APIVersion: Group + "/" + Version, Kind: "TranscriptList"},
			Entries: nonNil(es), Dropped: dropped, Last: last})
		return
	}
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		w.Header().Set("Retry-After", "5")
		status(w, http.StatusTooManyRequests, "TooManyRequests", "too many transcript streams open")
		return
	}
	s.follow(w, r, key, since, int(limit), strings.Contains(r.Header.Get("Accept"), "text/event-stream"))
}

func (s *Server) follow(w http.ResponseWriter, r *http.Request, key types.NamespacedName, since uint64, limit int, sse bool) {
	flusher, _ := w.(http.Flusher)
	rc := http.NewResponseController(w)
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.WriteHeader(http.StatusOK)
	ctx, cancel := context.WithTimeout(r.Context(), MaxFollow)
	defer cancel()
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	first := true
	for {
		es, _, changed := s.o.Transcripts.Read(key, since, limit)
		if !first {
			limit = 0
		}
		first = false
		for _, e := range es {
			line, err := json.Marshal(e)
			if err != nil {
				return
			}
			if sse {
				_, err = fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.Seq, line)
			} else {
				_, err = fmt.Fprintf(w, "%s\n", line)
			}
			if err != nil {
				return
			}
			since = e.Seq
		}
		_ = rc.SetWriteDeadline(time.Now().Add(time.Minute))
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
			sess := &agentsv1alpha1.AgentSession{}
			if err := s.o.Sessions.Get(ctx, key, sess); apierrors.IsNotFound(err) {
				return
			}
		case <-tick.C:
			var err error
			if sse {
				_, err = fmt.Fprint(w, ": ping\n\n")
			} else {
				_, err = fmt.Fprint(w, "\n")
			}
			if err != nil {
				return
			}
		}
	}
}

func nonNil(es []transcript.Entry) []transcript.Entry {
	if es == nil {
		return []transcript.Entry{}
	}
	return es
}

func parseUint(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

// Discovery, as the API server's aggregator and kubectl read it.

func (s *Server) apiGroupList(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
		Groups: []metav1.APIGroup{apiGroup()}})
}

func (s *Server) apiGroup(w http.ResponseWriter, _ *http.Request) {
	g := apiGroup()
	g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
	writeJSON(w, http.StatusOK, g)
}

func apiGroup() metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: Group + "/" + Version, Version: Version}
	return metav1.APIGroup{Name: Group, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
}

func (s *Server) apiResources(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: Group + "/" + Version,
		APIResources: []metav1.APIResource{
			{Name: "agentsessions/transcript", Namespaced: true, Kind: "TranscriptList", Verbs: metav1.Verbs{"get"}},
			{Name: "agentsessions/dashboard", Namespaced: true, Kind: "Page", Verbs: metav1.Verbs{"get"}},
			{Name: "agentsessions/steer", Namespaced: true, Kind: "Form", Verbs: metav1.Verbs{"create"}},
			{Name: "dashboard", Namespaced: false, Kind: "Page", Verbs: metav1.Verbs{"list"}},
			{Name: "projects/issues", Namespaced: true, Kind: "IssueList", Verbs: metav1.Verbs{"get"}},
		}})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// status answers with a Kubernetes Status, as kubectl prints it.
func status(w http.ResponseWriter, code int, reason, msg string) {
	writeJSON(w, code, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Code: int32(code), Reason: metav1.StatusReason(reason), Message: msg})
}
