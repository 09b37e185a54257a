package github

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// graphQLError is one entry of a GraphQL response's errors.
type graphQLError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Path    []any  `json:"path"`
}

type graphQLResponse struct {
	Data   json.RawMessage `json:"data"`
	Errors []graphQLError  `json:"errors"`
}

// rateLimitInfo is the rateLimit object every query asks for.
type rateLimitInfo struct {
	Cost      int       `json:"cost"`
	Limit     int       `json:"limit"`
	Remaining int       `json:"remaining"`
	ResetAt   time.Time `json:"resetAt"`
}

// rateLimitSelection is added to every query: GitHub reports the query's cost in it.
const rateLimitSelection = "rateLimit { cost limit remaining resetAt }"

// GraphQL sends a query and decodes its data into out. estimatedCost (GitHub's documented
// formula, see cost) lets the governor wait for, or refuse, a query the remaining points cannot
// pay for. Partial errors come back with the data: the caller decides which ones matter.
func (c *Client) GraphQL(ctx context.Context, op, query string, vars map[string]any, estimatedCost int, out any) ([]graphQLError, error) {
	ctx = withOp(ctx, op)
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return nil, fmt.Errorf("encode graphql request: %w", err)
	}
	for attempt := 0; ; attempt++ {
		if err := c.gov.waitForPoints(ctx, estimatedCost); err != nil {
			c.gov.count(scm.KindGraphQL, op, scm.OutcomeRefusedBeforeSend)
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.graphqlURL, bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("graphql request: %w", err)
		}
		req.Header.Set("Content-Type", "application/json")
		// mergeStateStatus was a preview field; asking for the preview is harmless where it is
		// generally available and needed where it is not (older GitHub Enterprise Server).
		req.Header.Set("Accept", "application/vnd.github.merge-info-preview+json")
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, mapTransportError(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, httpError(resp.StatusCode, b)
		}
		var gr graphQLResponse
		if err := json.Unmarshal(b, &gr); err != nil {
			c.gov.count(scm.KindGraphQL, op, scm.OutcomeOK)
			return nil, &scm.APIError{Kind: scm.ErrUnavailable, Message: "graphql response is not JSON", Err: err}
		}
		var rl struct {
			RateLimit *rateLimitInfo `json:"rateLimit"`
		}
		if len(gr.Data) > 0 && string(gr.Data) != "null" {
			_ = json.Unmarshal(gr.Data, &rl)
		}
		if rl.RateLimit != nil {
			c.gov.observeGraphQL(*rl.RateLimit)
			if c.cfg.Metrics != nil {
				c.cfg.Metrics.GraphQLPoints.WithLabelValues(providerName, c.identity, op).Add(float64(rl.RateLimit.Cost))
			}
		}
		var limited bool
		var other []graphQLError
		for _, e := range gr.Errors {
			if e.Type == "RATE_LIMITED" || e.Type == "RATE_LIMIT" {
				limited = true
			} else {
				other = append(other, e)
			}
		}
		noData := len(gr.Data) == 0 || string(gr.Data) == "null"
		switch {
		case !limited && noData && len(other) > 0:
			// Refused as a whole (MAX_NODE_LIMIT_EXCEEDED, a schema error, …): an error, not an
			// answer, whatever the HTTP status says.
			c.gov.count(scm.KindGraphQL, op, outcomeOfGraphQLError(graphQLErrorsToError(other)))
		case !limited:
			c.gov.count(scm.KindGraphQL, op, scm.OutcomeOK)
		default:
			// GitHub answers an exhausted GraphQL budget with 200 and a RATE_LIMITED error.
			c.gov.count(scm.KindGraphQL, op, scm.OutcomeRateLimited)
			reset := c.gov.graphqlReset()
			wait := reset.Sub(c.gov.clock.Now())
			if attempt == 0 && wait <= c.cfg.MaxWait {
				if err := c.gov.sleep(ctx, max(wait, time.Second), false); err != nil {
					return nil, err
				}
				continue
			}
			return nil, &scm.RateLimitError{Resource: "graphql", Reset: reset}
		}
		if noData {
			if len(other) > 0 {
				return other, graphQLErrorsToError(other)
			}
			return nil, &scm.APIError{Kind: scm.ErrUnavailable, Message: "graphql response without data"}
		}
		if out != nil {
			if err := json.Unmarshal(gr.Data, out); err != nil {
				return other, &scm.APIError{Kind: scm.ErrUnavailable, Message: "decode graphql data", Err: err}
			}
		}
		return other, nil
	}
}

// graphQLErrorsToError maps errors that refused a whole query. Each message keeps GitHub's
// error type: MAX_NODE_LIMIT_EXCEEDED, for one, says the query asked for more than 500,000 nodes
// and will be refused again as it is (the adapter's queries stay far under the limit by
// construction, see fullBatch), so it is a clear, not retryable ErrInvalid.
func graphQLErrorsToError(errs []graphQLError) error {
	msgs := make([]string, 0, len(errs))
	kind := scm.ErrInvalid
	for _, e := range errs {
		if e.Type != "" {
			msgs = append(msgs, e.Type+": "+e.Message)
		} else {
			msgs = append(msgs, e.Message)
		}
		switch e.Type {
		case "NOT_FOUND":
			kind = scm.ErrNotFound
		case "FORBIDDEN":
			kind = scm.ErrPermissionDenied
		case "SERVICE_UNAVAILABLE", "INTERNAL":
			kind = scm.ErrUnavailable
		}
	}
	return &scm.APIError{Kind: kind, Status: http.StatusOK, Message: strings.Join(msgs, "; ")}
}

// outcomeOfGraphQLError is the metrics outcome of a query GitHub refused with errors.
func outcomeOfGraphQLError(err error) string {
	switch {
	case errors.Is(err, scm.ErrNotFound):
		return scm.OutcomeNotFound
	case errors.Is(err, scm.ErrUnavailable):
		return scm.OutcomeServerError
	}
	return scm.OutcomeClientError
}

// observeGraphQL records the budget the query's rateLimit object reported.
func (g *governor) observeGraphQL(rl rateLimitInfo) {
	g.mu.Lock()
	g.limits["graphql"] = &limitState{known: true, limit: rl.Limit, remaining: rl.Remaining, reset: rl.ResetAt}
	g.mu.Unlock()
	if g.metrics != nil {
		g.metrics.RateLimitRemaining.WithLabelValues(providerName, g.identity, "graphql").Set(float64(rl.Remaining))
	}
}

func (g *governor) graphqlReset() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.limits["graphql"]; l != nil && l.known && l.reset.After(g.clock.Now()) {
		return l.reset
	}
	return g.clock.Now().Add(time.Minute)
}

// waitForPoints waits (up to maxWait) or refuses when the GraphQL budget is known to be smaller
// than the query's cost, rather than sending a query GitHub will refuse.
func (g *governor) waitForPoints(ctx context.Context, cost int) error {
	if err := g.waitForBudget(ctx, "graphql"); err != nil {
		return err
	}
	now := g.clock.Now()
	g.mu.Lock()
	l := g.limits["graphql"]
	short := l != nil && l.known && l.remaining < cost && now.Before(l.reset)
	var reset time.Time
	if short {
		reset = l.reset
	}
	g.mu.Unlock()
	if !short {
		return nil
	}
	wait := reset.Sub(now)
	if wait > g.maxWait {
		return &scm.RateLimitError{Resource: "graphql", Reset: reset}
	}
	return g.sleep(ctx, wait, false)
}

// mapTransportError unwraps what the HTTP client wrapped: the governor's typed errors pass
// through, everything else is an unavailable forge.
func mapTransportError(err error) error {
	var rl *scm.RateLimitError
	if errors.As(err, &rl) {
		return rl
	}
	var ae *scm.APIError
	if errors.As(err, &ae) {
		return ae
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &scm.APIError{Kind: scm.ErrUnavailable, Message: "request timed out or was cancelled", Err: err}
	}
	return &scm.APIError{Kind: scm.ErrUnavailable, Err: err}
}

// httpError maps a non-success HTTP status to a typed error.
func httpError(status int, body []byte) error {
	var e struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &e)
	kind := scm.ErrInvalid
	switch {
	case status == http.StatusUnauthorized:
		kind = scm.ErrTokenRejected
	case status == http.StatusForbidden:
		kind = scm.ErrPermissionDenied
	case status == http.StatusNotFound:
		kind = scm.ErrNotFound
	case status >= 500:
		kind = scm.ErrUnavailable
	}
	return &scm.APIError{Kind: kind, Status: status, Message: e.Message}
}
