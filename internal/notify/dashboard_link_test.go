package notify

import (
	"strings"
	"testing"
)

// TestSlackLinksTheDashboard: a notification names the session's dashboard page (the deep link
// "session widgets-42 needs you" carries), escaped like every link.
func TestSlackLinksTheDashboard(t *testing.T) {
	body, err := SlackPayload(Notification{Type: "agent.needs-input", Priority: "action", Namespace: "team-a", Session: "widgets-42",
		Message: "asks which database", DashboardURL: "http://127.0.0.1:8001/apis/ui.agents.shepherd.dev/v1alpha1/namespaces/team-a/agentsessions/widgets-42/dashboard"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), "namespaces/team-a/agentsessions/widgets-42/dashboard|Open in the dashboard") {
		t.Fatalf("no dashboard link in %s", body)
	}
	body, _ = SlackPayload(Notification{Type: "x", DashboardURL: "javascript:alert(1)"})
	if strings.Contains(string(body), "javascript") {
		t.Fatalf("a javascript: link passed: %s", body)
	}
}
