package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// SlackSender posts to a Slack incoming webhook. The URL is a credential (it comes from a
// Secret) and is never logged: errors name only the host.
type SlackSender struct {
	URL    string
	Client *http.Client
	Now    func() time.Time
}

// slackMessage is the incoming-webhook payload: a fallback text plus Block Kit sections.
type slackMessage struct {
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

type slackBlock struct {
	Type string     `json:"type"`
	Text *slackText `json:"text,omitempty"`
}

type slackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

var priorityEmoji = map[agentsv1alpha1.Priority]string{
	agentsv1alpha1.PriorityUrgent:  ":rotating_light:",
	agentsv1alpha1.PriorityAction:  ":point_right:",
	agentsv1alpha1.PriorityWarning: ":warning:",
	agentsv1alpha1.PriorityInfo:    ":information_source:",
}

// slackEscape escapes the three characters Slack's mrkdwn treats as control characters.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// slackLink is u fit for <u|text>: an http(s) URL with Slack's control characters escaped and
// the separator '|' percent-encoded; anything else is dropped.
func slackLink(u string) string {
	if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		return ""
	}
	return strings.ReplaceAll(slackEscape(u), "|", "%7C")
}

// SlackPayload renders n as an incoming-webhook message.
func SlackPayload(n Notification) ([]byte, error) {
	title := fmt.Sprintf("%s *%s* %s/%s", priorityEmoji[n.Priority], slackEscape(n.Type), slackEscape(n.Namespace), slackEscape(n.Session))
	text := slackEscape(n.Message)
	if u := slackLink(n.PullRequestURL); u != "" {
		text += fmt.Sprintf("\n<%s|Pull request>", u)
	}
	if u := slackLink(n.DashboardURL); u != "" {
		text += fmt.Sprintf("\n<%s|Open in the dashboard> (`kubectl shepherd dashboard`)", u)
	}
	// The fallback text (notifications, screen readers) is mrkdwn too: a message carrying
	// <!channel> or <https://evil|a trusted name> must not ping or spoof.
	return json.Marshal(slackMessage{
		Text: slackEscape(fmt.Sprintf("[%s] %s %s/%s: %s", n.Priority, n.Type, n.Namespace, n.Session, n.Message)),
		Blocks: []slackBlock{
			{Type: "section", Text: &slackText{Type: "mrkdwn", Text: title}},
			{Type: "section", Text: &slackText{Type: "mrkdwn", Text: text}},
		},
	})
}

// Send makes one attempt. Slack answers 200 "ok"; errors are 400 invalid_payload, 403
// action_prohibited, 404 no_service, 410 channel_is_archived (all permanent) and 429 with
// Retry-After.
func (s *SlackSender) Send(ctx context.Context, n Notification) error {
	body, err := SlackPayload(n)
	if err != nil {
		return fmt.Errorf("encode slack message: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return &PermanentError{Body: "invalid Slack webhook URL"}
	}
	req.Header.Set("Content-Type", "application/json")
	return do(s.Client, req, s.Now)
}
