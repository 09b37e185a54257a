package gitea

import "time"

// The shapes of Gitea's API objects (modules/structs in Gitea), only the fields the adapter reads.

type apiUser struct {
	Login string `json:"login"`
}

type apiRepo struct {
	FullName      string   `json:"full_name"`
	Name          string   `json:"name"`
	Owner         *apiUser `json:"owner"`
	DefaultBranch string   `json:"default_branch"`
	Private       bool     `json:"private"`
	Permissions   *struct {
		Admin bool `json:"admin"`
		Push  bool `json:"push"`
		Pull  bool `json:"pull"`
	} `json:"permissions"`
	HasPullRequests bool `json:"has_pull_requests"`
}

type apiBranchInfo struct {
	// Label is the branch name (Gitea's PRBranchInfo.Name), kept after the branch is deleted.
	Label string `json:"label"`
	// Ref is the branch name while the branch exists, refs/pull/N/head after it was deleted.
	Ref  string   `json:"ref"`
	SHA  string   `json:"sha"`
	Repo *apiRepo `json:"repo"`
}

type apiPull struct {
	Number         int            `json:"number"`
	HTMLURL        string         `json:"html_url"`
	Title          string         `json:"title"`
	Body           string         `json:"body"`
	State          string         `json:"state"`
	Draft          bool           `json:"draft"`
	Additions      int            `json:"additions"`
	Deletions      int            `json:"deletions"`
	Mergeable      bool           `json:"mergeable"`
	Merged         bool           `json:"merged"`
	MergedCommitID *string        `json:"merge_commit_sha"`
	MergeBase      string         `json:"merge_base"`
	Base           *apiBranchInfo `json:"base"`
	Head           *apiBranchInfo `json:"head"`
	User           *apiUser       `json:"user"`
	Updated        *time.Time     `json:"updated_at"`
	Comments       int            `json:"comments"`
	ReviewComments int            `json:"review_comments"`
}

type apiStatus struct {
	ID        int64     `json:"id"`
	Context   string    `json:"context"`
	State     string    `json:"status"`
	TargetURL string    `json:"target_url"`
	Updated   time.Time `json:"updated_at"`
}

type apiCombinedStatus struct {
	State      string       `json:"state"`
	SHA        string       `json:"sha"`
	TotalCount int          `json:"total_count"`
	Statuses   []*apiStatus `json:"statuses"`
}

type apiReview struct {
	ID            int64     `json:"id"`
	User          *apiUser  `json:"user"`
	State         string    `json:"state"`
	Body          string    `json:"body"`
	CommitID      string    `json:"commit_id"`
	Stale         bool      `json:"stale"`
	Official      bool      `json:"official"`
	Dismissed     bool      `json:"dismissed"`
	CommentsCount int       `json:"comments_count"`
	Submitted     time.Time `json:"submitted_at"`
	HTMLURL       string    `json:"html_url"`
}

type apiReviewComment struct {
	ID           int64     `json:"id"`
	Body         string    `json:"body"`
	User         *apiUser  `json:"user"`
	Resolver     *apiUser  `json:"resolver"`
	ReviewID     int64     `json:"pull_request_review_id"`
	Path         string    `json:"path"`
	CommitID     string    `json:"commit_id"`
	Position     int       `json:"position"`
	OrigPosition int       `json:"original_position"`
	HTMLURL      string    `json:"html_url"`
	Created      time.Time `json:"created_at"`
}

// apiComment is a comment in an issue's or pull request's conversation.
type apiComment struct {
	ID      int64     `json:"id"`
	HTMLURL string    `json:"html_url"`
	User    *apiUser  `json:"user"`
	Body    string    `json:"body"`
	Created time.Time `json:"created_at"`
}

type apiBranch struct {
	Name                          string   `json:"name"`
	Protected                     bool     `json:"protected"`
	RequiredApprovals             int      `json:"required_approvals"`
	EnableStatusCheck             bool     `json:"enable_status_check"`
	StatusCheckContexts           []string `json:"status_check_contexts"`
	UserCanPush                   bool     `json:"user_can_push"`
	UserCanMerge                  bool     `json:"user_can_merge"`
	EffectiveBranchProtectionName string   `json:"effective_branch_protection_name"`
}

type apiProtection struct {
	RuleName                      string `json:"rule_name"`
	BlockOnRejectedReviews        bool   `json:"block_on_rejected_reviews"`
	BlockOnOfficialReviewRequests bool   `json:"block_on_official_review_requests"`
	BlockOnOutdatedBranch         bool   `json:"block_on_outdated_branch"`
	IgnoreStaleApprovals          bool   `json:"ignore_stale_approvals"`
}
