package webhook

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// maxRefs bounds each list in a hint, whatever a payload carries.
const maxRefs = 100

// Events the handler turns into hints: GitHub's names, and Gitea's where they differ. Gitea sends
// its reviews as pull_request_approved, pull_request_rejected and pull_request_comment (a line
// comment) with the pull_request payload, a push to a pull request's head as pull_request with
// action "synchronized", and branch deletions as delete, as GitHub does.
var events = map[string]bool{
	"pull_request":                true,
	"pull_request_review":         true,
	"pull_request_review_comment": true,
	"pull_request_review_thread":  true,
	"pull_request_approved":       true, // Gitea
	"pull_request_rejected":       true, // Gitea
	"pull_request_comment":        true, // Gitea
	"check_run":                   true,
	"check_suite":                 true,
	"status":                      true,
	"issue_comment":               true,
	"issues":                      true, // closed issues: the issue watch asks again
	"push":                        true,
	"delete":                      true,
	"ping":                        true,
}

// Supported reports whether the handler routes an event.
func Supported(event string) bool { return events[event] }

// payload is the union of the fields of the supported events that Shepherd reads: routing
// (which pull requests, branches and commits a delivery concerns) and the facts it states (see
// facts). The delivery is verified before it is parsed, so its facts are the forge's own.
type payload struct {
	Action     string `json:"action"`
	Repository *struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	Number      int     `json:"number"`
	PullRequest *prRef  `json:"pull_request"`
	Ref         string  `json:"ref"`
	RefType     string  `json:"ref_type"`
	After       string  `json:"after"`
	Deleted     bool    `json:"deleted"`
	SHA         string  `json:"sha"`
	Context     string  `json:"context"`
	State       string  `json:"state"`
	TargetURL   string  `json:"target_url"`
	Branches    []named `json:"branches"`
	CheckRun    *struct {
		Name         string  `json:"name"`
		Status       string  `json:"status"`
		Conclusion   string  `json:"conclusion"`
		DetailsURL   string  `json:"details_url"`
		HeadSHA      string  `json:"head_sha"`
		PullRequests []prRef `json:"pull_requests"`
		CheckSuite   *suite  `json:"check_suite"`
	} `json:"check_run"`
	CheckSuite *suite `json:"check_suite"`
	Review     *struct {
		ID                int64     `json:"id"`
		NodeID            string    `json:"node_id"`
		State             string    `json:"state"`
		CommitID          string    `json:"commit_id"`
		SubmittedAt       time.Time `json:"submitted_at"`
		AuthorAssociation string    `json:"author_association"`
		User              *struct {
			Login string `json:"login"`
		} `json:"user"`
	} `json:"review"`
	Issue *struct {
		Number      int             `json:"number"`
		PullRequest json.RawMessage `json:"pull_request"`
	} `json:"issue"`
}

type prRef struct {
	Number         int       `json:"number"`
	State          string    `json:"state"`
	Merged         bool      `json:"merged"`
	Draft          bool      `json:"draft"`
	Title          string    `json:"title"`
	MergeCommitSHA string    `json:"merge_commit_sha"`
	UpdatedAt      time.Time `json:"updated_at"`
	Head           *struct {
		Ref string `json:"ref"`
		SHA string `json:"sha"`
	} `json:"head"`
	Base *struct {
		Ref string `json:"ref"`
	} `json:"base"`
}

type suite struct {
	HeadBranch   *string `json:"head_branch"`
	HeadSHA      string  `json:"head_sha"`
	PullRequests []prRef `json:"pull_requests"`
	App          *struct {
		Slug string `json:"slug"`
	} `json:"app"`
}

type named struct {
	Name string `json:"name"`
}

// Parse turns a verified delivery into a hint. The event must be Supported.
func Parse(event string, body []byte) (scm.Hint, error) {
	var p payload
	if err := json.Unmarshal(body, &p); err != nil {
		return scm.Hint{}, fmt.Errorf("%s payload: %w", event, err)
	}
	if p.Repository == nil {
		if event == "ping" {
			// An organisation's or an App's hook pings without a repository.
			return scm.Hint{Event: event}, nil
		}
		return scm.Hint{}, fmt.Errorf("%s payload names no repository", event)
	}
	repo, err := scm.ParseRepo(p.Repository.FullName)
	if err != nil {
		return scm.Hint{}, fmt.Errorf("%s payload: %w", event, err)
	}
	h := &hintBuilder{hint: scm.Hint{Repo: repo, Event: event}}
	switch event {
	case "pull_request", "pull_request_review", "pull_request_review_comment", "pull_request_review_thread",
		"pull_request_approved", "pull_request_rejected", "pull_request_comment":
		h.number(p.Number)
		h.pr(p.PullRequest)
	case "check_run":
		if p.CheckRun != nil {
			h.sha(p.CheckRun.HeadSHA)
			for i := range p.CheckRun.PullRequests {
				h.pr(&p.CheckRun.PullRequests[i])
			}
			h.suite(p.CheckRun.CheckSuite)
		}
	case "check_suite":
		h.suite(p.CheckSuite)
	case "status":
		h.sha(p.SHA)
		for _, b := range p.Branches {
			h.branch(b.Name)
		}
	case "issue_comment":
		// Comments on issues that are not pull requests change nothing Shepherd follows.
		if p.Issue != nil && len(p.Issue.PullRequest) > 0 && string(p.Issue.PullRequest) != "null" {
			h.number(p.Issue.Number)
		}
	case "issues":
		// Only a close is news (a session on that issue ends); GitHub sends pull requests' own
		// events separately, and Gitea names the issue in "number" too.
		if p.Action == "closed" && (p.Issue == nil || len(p.Issue.PullRequest) == 0 || string(p.Issue.PullRequest) == "null") {
			n := p.Number
			if p.Issue != nil && p.Issue.Number > 0 {
				n = p.Issue.Number
			}
			if n > 0 {
				h.hint.ClosedIssues = []int{n}
			}
		}
	case "push":
		if b, ok := strings.CutPrefix(p.Ref, "refs/heads/"); ok {
			h.branch(b)
			h.sha(p.After)
		}
	case "delete":
		// A deleted head leaves its pull requests open or merged; a deleted base closes them.
		if p.RefType == "branch" {
			h.branch(strings.TrimPrefix(p.Ref, "refs/heads/"))
		}
	case "ping":
	default:
		return scm.Hint{}, fmt.Errorf("event %q is not routed", event)
	}
	h.hint.Facts = facts(event, &p)
	return h.hint, nil
}

type hintBuilder struct{ hint scm.Hint }

func (h *hintBuilder) number(n int) {
	if n > 0 && len(h.hint.Numbers) < maxRefs && !containsInt(h.hint.Numbers, n) {
		h.hint.Numbers = append(h.hint.Numbers, n)
	}
}

func (h *hintBuilder) branch(b string) {
	if b != "" && len(b) <= 255 && len(h.hint.Branches) < maxRefs && !containsStr(h.hint.Branches, b) {
		h.hint.Branches = append(h.hint.Branches, b)
	}
}

func (h *hintBuilder) sha(s string) {
	// The all-zero SHA marks a deleted branch in push events.
	if len(s) >= 40 && len(s) <= 64 && strings.Trim(s, "0") != "" && len(h.hint.SHAs) < maxRefs && !containsStr(h.hint.SHAs, s) {
		h.hint.SHAs = append(h.hint.SHAs, s)
	}
}

func (h *hintBuilder) pr(p *prRef) {
	if p == nil {
		return
	}
	h.number(p.Number)
	if p.Head != nil {
		h.branch(p.Head.Ref)
		h.sha(p.Head.SHA)
	}
}

func (h *hintBuilder) suite(s *suite) {
	if s == nil {
		return
	}
	h.sha(s.HeadSHA)
	if s.HeadBranch != nil {
		h.branch(*s.HeadBranch)
	}
	for i := range s.PullRequests {
		h.pr(&s.PullRequests[i])
	}
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func containsStr(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
