package gitea

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestParseGoModCopiesEveryReplace(t *testing.T) {
	g := NewWithT(t)
	v, rs := parseGoMod(`module code.gitea.io/gitea

go 1.26.2

require (
	example.com/a v1.0.0
)

replace example.com/a => example.com/b v1.2.3 // why

replace (
	example.com/c => example.com/d v0.1.0
	// a comment
	example.com/e v1.0.0 => ../e
)
`)
	g.Expect(v).To(Equal("1.26.2"))
	g.Expect(rs).To(Equal([]string{"example.com/a => example.com/b v1.2.3", "example.com/c => example.com/d v0.1.0", "example.com/e v1.0.0 => ../e"}))
}

func TestAppINIHasTheHeadlessEssentials(t *testing.T) {
	g := NewWithT(t)
	ini, err := appINI(Options{Addr: "0.0.0.0", Host: "10.0.0.5", WebhookHosts: []string{"loopback", "private"}, LogLevel: "Warn"},
		"/run/g", "/cache/gitea", 3000, "http://10.0.0.5:3000/")
	g.Expect(err).NotTo(HaveOccurred())
	for _, want := range []string{
		"HTTP_ADDR = 0.0.0.0", "HTTP_PORT = 3000", "ROOT_URL = http://10.0.0.5:3000/", "OFFLINE_MODE = true", "DISABLE_SSH = true",
		"STATIC_ROOT_PATH = /cache/gitea", "DB_TYPE = sqlite3", "SQLITE_JOURNAL_MODE = WAL", "INSTALL_LOCK = true",
		"ALLOWED_HOST_LIST = loopback,private", "[queue]\nTYPE = channel", "ISSUE_INDEXER_TYPE = db", "[actions]\nENABLED = false",
		"[cron]\nENABLED = false", "[mailer]\nENABLED = false", "DISABLE_REGISTRATION = true",
	} {
		g.Expect(ini).To(ContainSubstring(want))
	}
	// Every secret Gitea would otherwise generate and write back is set.
	for _, key := range []string{"SECRET_KEY = ", "INTERNAL_TOKEN = ", "JWT_SECRET = "} {
		i := strings.Index(ini, key)
		g.Expect(i).To(BeNumerically(">=", 0), key)
		g.Expect(strings.SplitN(ini[i+len(key):], "\n", 2)[0]).To(HaveLen(map[string]int{"SECRET_KEY = ": 64, "INTERNAL_TOKEN = ": 96, "JWT_SECRET = ": 43}[key]))
	}
}
