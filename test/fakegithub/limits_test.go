package fakegithub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
)

// postGraphQL sends a query as the world's token and returns the status and the body.
func postGraphQL(t *testing.T, s *Server, q string, vars map[string]any) (int, []byte) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": q, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, s.URL()+"/graphql", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type threadPage struct {
	Data struct {
		Repository struct {
			PullRequest struct {
				ReviewThreads struct {
					TotalCount int `json:"totalCount"`
					PageInfo   struct {
						HasNextPage bool    `json:"hasNextPage"`
						EndCursor   *string `json:"endCursor"`
					} `json:"pageInfo"`
					Nodes []struct {
						ID         string `json:"id"`
						IsResolved bool   `json:"isResolved"`
						Line       int    `json:"line"`
					} `json:"nodes"`
				} `json:"reviewThreads"`
			} `json:"pullRequest"`
		} `json:"repository"`
	} `json:"data"`
	Errors []gqlErr `json:"errors"`
}

func TestReviewThreadsPageLikeGitHub(t *testing.T) {
	g := NewWithT(t)
	s, _, n := world(t) // one resolved thread already
	for i := 2; i <= 150; i++ {
		_, err := s.AddReviewThread("octocat/Hello-World", n, "hubot", "f.txt", i, fmt.Sprintf("remark %d", i))
		g.Expect(err).NotTo(HaveOccurred())
	}
	q := `query($n: Int!, $first: Int!, $after: String) {
  repository(owner: "octocat", name: "Hello-World") { pullRequest(number: $n) {
    reviewThreads(first: $first, after: $after) { totalCount pageInfo { hasNextPage endCursor } nodes { id isResolved line } }
  } }
}`
	page := func(first int, after *string) threadPage {
		t.Helper()
		vars := map[string]any{"n": n, "first": first}
		if after != nil {
			vars["after"] = *after
		}
		status, b := postGraphQL(t, s, q, vars)
		g.Expect(status).To(Equal(http.StatusOK))
		var p threadPage
		g.Expect(json.Unmarshal(b, &p)).To(Succeed(), string(b))
		g.Expect(p.Errors).To(BeEmpty(), string(b))
		return p
	}

	// first: 100 is one full page; the cursor of its last node continues exactly after it.
	var lines []int
	p1 := page(100, nil).Data.Repository.PullRequest.ReviewThreads
	g.Expect(p1.TotalCount).To(Equal(150), "resolved threads are listed too")
	g.Expect(p1.Nodes).To(HaveLen(100))
	g.Expect(p1.Nodes[0].IsResolved).To(BeTrue())
	g.Expect(p1.PageInfo.HasNextPage).To(BeTrue())
	g.Expect(p1.PageInfo.EndCursor).NotTo(BeNil())
	p2 := page(100, p1.PageInfo.EndCursor).Data.Repository.PullRequest.ReviewThreads
	g.Expect(p2.Nodes).To(HaveLen(50))
	g.Expect(p2.PageInfo.HasNextPage).To(BeFalse())
	g.Expect(p2.PageInfo.EndCursor).NotTo(BeNil())
	for _, nd := range append(p1.Nodes, p2.Nodes...) {
		lines = append(lines, nd.Line)
	}
	for i, l := range lines {
		g.Expect(l).To(Equal(i+1), "every thread once, in order")
	}
	// After the last node: an empty page, no next page and no cursor (GitHub's endCursor is null
	// on an empty page).
	p3 := page(100, p2.PageInfo.EndCursor).Data.Repository.PullRequest.ReviewThreads
	g.Expect(p3.Nodes).To(BeEmpty())
	g.Expect(p3.PageInfo.HasNextPage).To(BeFalse())
	g.Expect(p3.PageInfo.EndCursor).To(BeNil())
	// Smaller pages walk the same threads.
	var walked []int
	var after *string
	for pages := 0; pages < 10; pages++ {
		c := page(40, after).Data.Repository.PullRequest.ReviewThreads
		for _, nd := range c.Nodes {
			walked = append(walked, nd.Line)
		}
		if !c.PageInfo.HasNextPage {
			break
		}
		after = c.PageInfo.EndCursor
	}
	g.Expect(walked).To(Equal(lines))

	// More than 100 per page is refused, as GitHub does.
	status, b := postGraphQL(t, s, q, map[string]any{"n": n, "first": 101})
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(string(b)).To(ContainSubstring("EXCESSIVE_PAGINATION"))
	g.Expect(string(b)).NotTo(ContainSubstring(`"data"`))
}

func TestNodeLimitAnswerKeepsGitHubShape(t *testing.T) {
	g := NewWithT(t)
	s, _, _ := world(t)
	before := s.Stats()
	// 100 + 100×100 + 100×100×100 = 1,010,100 nodes: over GitHub's 500,000.
	status, b := postGraphQL(t, s, `query { repository(owner: "octocat", name: "Hello-World") {
  pullRequests(first: 100) { nodes { reviewThreads(first: 100) { nodes { comments(first: 100) { nodes { body } } } } } } } }`, nil)
	g.Expect(status).To(Equal(http.StatusOK))
	expectShape(t, "graphql/max-node-limit.json", b)
	var out struct {
		Data   json.RawMessage `json:"data"`
		Errors []gqlErr        `json:"errors"`
	}
	g.Expect(json.Unmarshal(b, &out)).To(Succeed())
	g.Expect(out.Data).To(BeNil(), "refused before it ran: no data")
	g.Expect(out.Errors).To(HaveLen(1))
	g.Expect(out.Errors[0].Type).To(Equal("MAX_NODE_LIMIT_EXCEEDED"))
	g.Expect(out.Errors[0].Message).To(ContainSubstring("1010100"))
	after := s.Stats()
	g.Expect(after.GraphQLPoints).To(Equal(before.GraphQLPoints), "nothing charged")
	g.Expect(after.GraphQLQueries).To(Equal(before.GraphQLQueries))

	// Just under the limit runs: 100 + 100×100 + 100×100×49 = 500,100 is over, 48 is under.
	status, b = postGraphQL(t, s, `query { repository(owner: "octocat", name: "Hello-World") {
  pullRequests(first: 100) { nodes { reviewThreads(first: 100) { nodes { comments(first: 48) { nodes { body } } } } } } } }`, nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(string(b)).NotTo(ContainSubstring("MAX_NODE_LIMIT_EXCEEDED"))
	g.Expect(string(b)).To(ContainSubstring(`"data"`))
	status, b = postGraphQL(t, s, `query { repository(owner: "octocat", name: "Hello-World") {
  pullRequests(first: 100) { nodes { reviewThreads(first: 100) { nodes { comments(first: 49) { nodes { body } } } } } } } }`, nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(string(b)).To(ContainSubstring("MAX_NODE_LIMIT_EXCEEDED"))
}

func TestMergeableUnknownFirstIsOneReadPerQuery(t *testing.T) {
	g := NewWithT(t)
	s, rec := helloWorld(t, Options{MergeableUnknownFirst: true})
	_, err := s.Push("octocat/Hello-World", "topic", map[string]string{"f.txt": "x"}, "work")
	g.Expect(err).NotTo(HaveOccurred())
	n, err := s.OpenPullRequest("octocat/Hello-World", "octocat", "topic", "main", "Topic", "", false)
	g.Expect(err).NotTo(HaveOccurred())
	// A push: the synchronize webhook is no read and carries the uncomputed value.
	_, err = s.Push("octocat/Hello-World", "topic", map[string]string{"g.txt": "y"}, "more")
	g.Expect(err).NotTo(HaveOccurred())
	rec.mu.Lock()
	hooks := rec.byEv["pull_request"]
	rec.mu.Unlock()
	g.Expect(hooks).NotTo(BeEmpty())
	var payload struct {
		PullRequest struct {
			Mergeable      *bool  `json:"mergeable"`
			MergeableState string `json:"mergeable_state"`
		} `json:"pull_request"`
	}
	g.Expect(json.Unmarshal(hooks[len(hooks)-1], &payload)).To(Succeed())
	g.Expect(payload.PullRequest.Mergeable).To(BeNil())
	g.Expect(payload.PullRequest.MergeableState).To(Equal("unknown"))

	q := fmt.Sprintf(`query { repository(owner: "octocat", name: "Hello-World") {
  a: pullRequest(number: %d) { mergeable mergeStateStatus }
  b: pullRequest(number: %d) { mergeStateStatus mergeable }
} }`, n, n)
	read := func() map[string]string {
		status, b := postGraphQL(t, s, q, nil)
		g.Expect(status).To(Equal(http.StatusOK))
		var out struct {
			Data struct {
				Repository map[string]struct {
					Mergeable        string `json:"mergeable"`
					MergeStateStatus string `json:"mergeStateStatus"`
				} `json:"repository"`
			} `json:"data"`
		}
		g.Expect(json.Unmarshal(b, &out)).To(Succeed(), string(b))
		got := map[string]string{}
		for alias, v := range out.Data.Repository {
			got[alias] = v.Mergeable + "/" + v.MergeStateStatus
		}
		return got
	}
	// The query that starts the computation says UNKNOWN in every field that depends on it.
	g.Expect(read()).To(Equal(map[string]string{"a": "UNKNOWN/UNKNOWN", "b": "UNKNOWN/UNKNOWN"}))
	g.Expect(read()).To(Equal(map[string]string{"a": "MERGEABLE/CLEAN", "b": "MERGEABLE/CLEAN"}))
}
