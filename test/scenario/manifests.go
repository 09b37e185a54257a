package scenario

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// ManifestFiles are the templates in config/samples/demo, in the order they are applied.
var ManifestFiles = []string{"secrets.yaml", "project.yaml", "agentsession.yaml"}

// Values fill the templates' ${NAME} placeholders.
type Values struct {
	Forge, CloneURL, APIURL, ForgeToken, WebhookSecret string
	PollInterval                                       time.Duration
	ModelURL, ModelAPIKey, NoProxy                     string
	NotifyURL, NotifySecret                            string
	Issue                                              int
}

// ValuesFor are the Values of a forge, the model server's URL and the receiver's URL, with the
// node's IP as the agent's proxy exception.
func ValuesFor(f Forge, modelURL, notifyURL, host string, pollInterval time.Duration) Values {
	return Values{
		Forge: f.Provider(), CloneURL: f.CloneURL(), APIURL: f.APIURL(), ForgeToken: f.Token(), WebhookSecret: f.WebhookSecret(),
		PollInterval: pollInterval,
		ModelURL:     modelURL, ModelAPIKey: ModelAPIKey, NoProxy: host + ",127.0.0.1,localhost",
		NotifyURL: notifyURL, NotifySecret: NotifySecret,
		Issue: f.Issue(),
	}
}

func (v Values) vars() map[string]string {
	return map[string]string{
		"FORGE": v.Forge, "CLONE_URL": v.CloneURL, "API_URL": v.APIURL, "FORGE_TOKEN": v.ForgeToken,
		"WEBHOOK_SECRET": v.WebhookSecret, "POLL_INTERVAL": v.PollInterval.String(), "MODEL_URL": v.ModelURL,
		"MODEL_API_KEY": v.ModelAPIKey, "NO_PROXY": v.NoProxy, "NOTIFY_URL": v.NotifyURL,
		"NOTIFY_SECRET": v.NotifySecret, "ISSUE": strconv.Itoa(v.Issue),
	}
}

// Manifests are the rendered templates and the objects they hold.
type Manifests struct {
	// Files maps each template's name to its rendered text (comments kept).
	Files    map[string][]byte
	Secrets  []*corev1.Secret
	Project  *agentsv1alpha1.Project
	Session  *agentsv1alpha1.AgentSession
	ordered  []client.Object
	rendered []string
}

// Render fills the templates of dir (config/samples/demo) with v and decodes them strictly (an
// unknown field or a placeholder without a value is an error) into objects in namespace.
func Render(dir, namespace string, v Values) (*Manifests, error) {
	vars := v.vars()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := agentsv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	m := &Manifests{Files: map[string][]byte{}}
	for _, name := range ManifestFiles {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read the demo manifests: %w", err)
		}
		var missing []string
		text := os.Expand(string(raw), func(k string) string {
			val, ok := vars[k]
			if !ok || val == "" {
				missing = append(missing, k)
			}
			return val
		})
		if len(missing) > 0 {
			sort.Strings(missing)
			return nil, fmt.Errorf("%s: no value for %s", name, strings.Join(missing, ", "))
		}
		m.Files[name] = []byte(text)
		m.rendered = append(m.rendered, name)
		r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, _, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			o, ok := obj.(client.Object)
			if !ok {
				return nil, fmt.Errorf("%s: %T is not an object", name, obj)
			}
			o.SetNamespace(namespace)
			switch t := o.(type) {
			case *corev1.Secret:
				m.Secrets = append(m.Secrets, t)
			case *agentsv1alpha1.Project:
				m.Project = t
			case *agentsv1alpha1.AgentSession:
				m.Session = t
			default:
				return nil, fmt.Errorf("%s: unexpected %T", name, o)
			}
			m.ordered = append(m.ordered, o)
		}
	}
	if m.Project == nil || m.Session == nil {
		return nil, fmt.Errorf("%s: want a Project and an AgentSession", dir)
	}
	return m, nil
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// Write stores the rendered files in dir.
func (m *Manifests) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range m.rendered {
		if err := os.WriteFile(filepath.Join(dir, name), m.Files[name], 0o600); err != nil {
			return err
		}
	}
	return nil
}

// ApplySetup creates the Secrets and the Project (not the session: see CreateSession).
func (m *Manifests) ApplySetup(ctx context.Context, cl client.Client) error {
	for _, o := range m.ordered {
		if _, ok := o.(*agentsv1alpha1.AgentSession); ok {
			continue
		}
		if err := cl.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// CreateSession creates the AgentSession.
func (m *Manifests) CreateSession(ctx context.Context, cl client.Client) error {
	if err := cl.Create(ctx, m.Session); err != nil {
		return fmt.Errorf("create AgentSession %s: %w", m.Session.Name, err)
	}
	return nil
}
