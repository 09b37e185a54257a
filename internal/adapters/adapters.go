// Package adapters registers every forge and tracker adapter the manager ships (each adapter
// calls scm.Register or tracker.Register from its init). The manager's main imports it, as the
// runner's main imports internal/agent/all for the agent adapters; a test that runs the
// controllers imports it too.
package adapters

import (
	// Forges.
	_ "github.com/shepherd-dev/shepherd/internal/scm/gitea"
	_ "github.com/shepherd-dev/shepherd/internal/scm/github"

	// Trackers.
	_ "github.com/shepherd-dev/shepherd/internal/tracker/gitea"
	_ "github.com/shepherd-dev/shepherd/internal/tracker/github"
	_ "github.com/shepherd-dev/shepherd/internal/tracker/linear"
)
