package fakegithub

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

type window struct {
	used  int
	reset time.Time
}

type budget struct {
	core, graphql window
	// minute and points implement the secondary limit on points per minute.
	minute               time.Time
	restPoints, gqlPoint int
}

// forcedLimit makes the next requests fail with a secondary limit (a test control).
type forcedLimit struct {
	remaining  int
	retryAfter time.Duration
	status     int
}

func (s *Server) budgetOf(id *identity) *budget {
	b := s.budgets[id.budget]
	if b == nil {
		b = &budget{}
		s.budgets[id.budget] = b
	}
	return b
}

// win returns the window of a resource, rolled over when its hour ended.
func (s *Server) win(b *budget, resource string) (*window, int) {
	now := s.now()
	w, limit := &b.core, s.opts.CoreLimit
	if resource == "graphql" {
		w, limit = &b.graphql, s.opts.GraphQLLimit
	}
	if w.reset.IsZero() || !now.Before(w.reset) {
		w.used = 0
		w.reset = now.Add(time.Hour)
	}
	return w, limit
}

func (s *Server) setRateHeaders(h http.Header, id *identity, resource string) {
	w, limit := s.win(s.budgetOf(id), resource)
	h.Set("X-RateLimit-Limit", strconv.Itoa(limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(limit-w.used, 0)))
	h.Set("X-RateLimit-Used", strconv.Itoa(w.used))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(w.reset.Unix(), 10))
	h.Set("X-RateLimit-Resource", resource)
}

// primaryExhausted reports whether the resource has less than cost left.
func (s *Server) primaryExhausted(id *identity, resource string, cost int) bool {
	w, limit := s.win(s.budgetOf(id), resource)
	return w.used+cost > limit
}

func (s *Server) charge(id *identity, resource string, cost int) {
	w, _ := s.win(s.budgetOf(id), resource)
	w.used += cost
}

// secondaryLimited applies forced limits and the points-per-minute limit. It returns the
// Retry-After and status to answer with, or 0.
func (s *Server) secondaryLimited(id *identity, graphql bool, points int) (time.Duration, int) {
	if len(s.forcedLimits) > 0 {
		f := &s.forcedLimits[0]
		f.remaining--
		ra, st := f.retryAfter, f.status
		if f.remaining <= 0 {
			s.forcedLimits = s.forcedLimits[1:]
		}
		return ra, st
	}
	limit := s.opts.SecondaryPointsPerMinute
	if graphql {
		limit = s.opts.GraphQLSecondaryPointsPerMinute
	}
	if limit <= 0 {
		return 0, 0
	}
	b := s.budgetOf(id)
	now := s.now()
	if m := now.Truncate(time.Minute); !m.Equal(b.minute) {
		b.minute, b.restPoints, b.gqlPoint = m, 0, 0
	}
	used := &b.restPoints
	if graphql {
		used = &b.gqlPoint
	}
	if *used+points > limit {
		return max(b.minute.Add(time.Minute).Sub(now), time.Second), http.StatusForbidden
	}
	*used += points
	return 0, 0
}

// ForceSecondaryLimit makes the next n API requests fail with a secondary rate limit: status 403
// or 429, with Retry-After (none when retryAfter is 0, as GitHub sometimes does).
func (s *Server) ForceSecondaryLimit(n int, status int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forcedLimits = append(s.forcedLimits, forcedLimit{remaining: n, retryAfter: retryAfter, status: status})
}

// SetOutage makes every API request (REST and GraphQL, not git) authenticated as login answer
// status, a 5xx, until SetOutage(login, 0) ends the outage. Other identities are served as usual,
// so one test's outage does not stall another's.
func (s *Server) SetOutage(login string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if status == 0 {
		delete(s.outages, login)
		return
	}
	s.outages[login] = status
}

// FailRoute makes the next requests to route (as Stats.ByRoute names it, for example
// "PUT /repos/{o}/{r}/pulls/{x}/merge") answer the given statuses in turn, one request each, as
// GitHub does in a partial outage (a 502 from its front end, say); then the route is served as
// usual again. A failed request is counted in ByRoute and does nothing.
func (s *Server) FailRoute(route string, statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.routeFailures == nil {
		s.routeFailures = map[string][]int{}
	}
	s.routeFailures[route] = append(s.routeFailures[route], statuses...)
}

// ClearRouteFailures drops the failures still queued for route.
func (s *Server) ClearRouteFailures(route string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.routeFailures, route)
}

// routeFailure pops the next injected failure of route, or returns 0. The caller holds s.mu.
func (s *Server) routeFailure(route string) int {
	q := s.routeFailures[route]
	if len(q) == 0 {
		return 0
	}
	s.routeFailures[route] = q[1:]
	return q[0]
}

// outage returns the status an identity's requests fail with during an outage, or 0.
func (s *Server) outage(id *identity) int { return s.outages[id.login] }

func outageBody(status int) map[string]any {
	return apiError(fmt.Sprintf("Server Error (%d)", status), "https://www.githubstatus.com")
}

// ExhaustPrimary spends the whole hourly budget of a token's identity for a resource ("core" or
// "graphql"), as if it had made that many requests.
func (s *Server) ExhaustPrimary(token, resource string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.tokens[token]
	if id == nil {
		return
	}
	w, limit := s.win(s.budgetOf(id), resource)
	w.used = limit
}

// Remaining returns the budget left for a token's identity.
func (s *Server) Remaining(token, resource string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.tokens[token]
	if id == nil {
		return 0
	}
	w, limit := s.win(s.budgetOf(id), resource)
	return limit - w.used
}

func secondaryBody() map[string]any {
	return apiError("You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID.",
		"https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits")
}

func primaryBody(id *identity) map[string]any {
	return apiError("API rate limit exceeded for "+id.login+". (But here's the good news: Authenticated requests get a higher rate limit. Check out the documentation for more details.)",
		"https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-primary-rate-limits")
}
