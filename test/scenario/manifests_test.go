package scenario

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

func samplesDir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "config", "samples", "demo")
}

func testValues() Values {
	return Values{
		Forge: "gitea", CloneURL: "http://192.0.2.2:3000/forge-admin/greeter.git", APIURL: "http://192.0.2.2:3000/api/v1",
		ForgeToken: "tok", WebhookSecret: "hook", PollInterval: time.Hour,
		ModelURL: "http://192.0.2.2:4000", ModelAPIKey: ModelAPIKey, NoProxy: "192.0.2.2,127.0.0.1,localhost",
		NotifyURL: "http://192.0.2.2:5000/", NotifySecret: NotifySecret, Issue: 7,
	}
}

// The demo's templates render into valid objects (strict decoding: no unknown field), with every
// placeholder filled where the Project and the session need it.
func TestRenderDemoManifests(t *testing.T) {
	m, err := Render(samplesDir(t), "team", testValues())
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range m.Files {
		if strings.Contains(string(text), "${") {
			t.Errorf("%s keeps a placeholder", name)
		}
	}
	p, s := m.Project, m.Session
	if p.Namespace != "team" || s.Namespace != "team" {
		t.Errorf("namespaces %q, %q", p.Namespace, s.Namespace)
	}
	if p.Spec.SCM.Provider != agentsv1alpha1.SCMProvider("gitea") || p.Spec.Tracker == nil || p.Spec.Tracker.Provider != agentsv1alpha1.TrackerGitea {
		t.Errorf("providers: scm %q, tracker %+v", p.Spec.SCM.Provider, p.Spec.Tracker)
	}
	if string(p.Spec.Repository.URL) != testValues().CloneURL || string(p.Spec.SCM.APIURL) != testValues().APIURL {
		t.Errorf("repository %s, API %s", p.Spec.Repository.URL, p.Spec.SCM.APIURL)
	}
	if p.Spec.SCM.PollInterval == nil || p.Spec.SCM.PollInterval.Duration != time.Hour {
		t.Errorf("pollInterval %v", p.Spec.SCM.PollInterval)
	}
	// The model's key reaches the runner's model proxy only: the agent's env names no key and no
	// model URL (the runner sets the CLI's base URL to its proxy).
	if m := p.Spec.Agent.ModelAPI; m == nil || string(m.URL) != testValues().ModelURL || m.KeySecretRef.Name != "greeter-model" {
		t.Errorf("modelAPI %+v", p.Spec.Agent.ModelAPI)
	}
	for _, e := range p.Spec.Agent.Env {
		if strings.Contains(e.Name, "KEY") || strings.Contains(e.Name, "TOKEN") {
			t.Errorf("agent env carries %s", e.Name)
		}
	}
	if r := p.Spec.Reactions; r == nil || r.ApprovedAndGreen == nil || r.ApprovedAndGreen.Action != agentsv1alpha1.ReactionMerge {
		t.Errorf("approvedAndGreen reaction: %+v", p.Spec.Reactions)
	}
	if s.Name != "greeter-7" || s.Spec.Issue != "7" || s.Spec.ProjectRef.Name != p.Name {
		t.Errorf("session %s: issue %q, project %q", s.Name, s.Spec.Issue, s.Spec.ProjectRef.Name)
	}
	secrets := map[string]map[string]string{}
	for _, sec := range m.Secrets {
		secrets[sec.Name] = sec.StringData
	}
	if secrets["greeter-forge"]["token"] != "tok" || secrets["greeter-forge"]["webhook-secret"] != "hook" ||
		secrets["greeter-model"]["api-key"] != ModelAPIKey || secrets["greeter-notify"]["hmac"] != NotifySecret {
		t.Errorf("secrets: %v", secrets)
	}
	// Every Secret key the Project references exists.
	refs := []agentsv1alpha1.SecretKeyRef{*p.Spec.Repository.Credentials.SecretRef, *p.Spec.SCM.WebhookSecretRef,
		*p.Spec.Agent.ModelAPI.KeySecretRef, p.Spec.Notifications.Routes[0].Webhook.SecretRef}
	for _, ref := range refs {
		if _, ok := secrets[ref.Name][ref.Key]; !ok {
			t.Errorf("the Project references %s/%s, which the Secrets lack", ref.Name, ref.Key)
		}
	}
}

func TestRenderRefusesMissingValues(t *testing.T) {
	v := testValues()
	v.ModelURL, v.Forge = "", ""
	_, err := Render(samplesDir(t), "team", v)
	if err == nil || !strings.Contains(err.Error(), "FORGE") {
		t.Fatalf("Render without FORGE and MODEL_URL: %v", err)
	}
}
