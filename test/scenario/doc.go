// Package scenario is the whole-session story that the e2e suite (test/e2e) and the offline
// demo (hack/demo, run by `make run-local`) both play on the local cluster:
//
//   - a forge on the node's IP (the in-repo fake GitHub, or a real Gitea) holding the repository
//     acme/greeter with one issue, "Greet the world", and branch protection that requires a
//     check and an approval; its webhooks go to the manager's webhooks Service;
//   - the scripted model server (test/modelserver) on the node's IP, which the real Claude Code
//     in the agent pod talks to: one commit per turn (the task, the CI fix, the review fix);
//   - a receiver of the Project's signed notifications;
//   - the Secrets, Project and AgentSession of config/samples/demo, rendered with the addresses
//     of the above;
//   - Play, which follows the session's phases and acts as CI (a failing check on the first
//     commit, passing ones on the next) and as the reviewer (changes requested with a line
//     comment, then an approval) until the Merge reaction merges the pull request.
//
// Nothing here asserts: the e2e specs check what they need on what Play returns and on the
// servers, the demo prints it. Every wait is bounded.
package scenario
