-- Resource actions of a Shepherd AgentSession in the Argo CD UI. Base and table libraries only:
-- Argo CD never opens the standard libraries for actions.
--   stop          spec.state Stopped: the pod goes, the worktree and the conversation stay
--   restore       spec.state Running: the checkout is restored and the conversation resumed
--   send-message  appends a message (parameter "text") to spec.messages, delivered once
--   approve       a human merges: annotates the pull request head it approves; Shepherd merges
--                 that head (and only it) when the session is Mergeable
local actions = {}

local phase = ""
if obj.status ~= nil and obj.status.phase ~= nil then
  phase = obj.status.phase
end
local ended = phase == "Merged" or phase == "Done" or phase == "Errored"
local deleting = obj.metadata.deletionTimestamp ~= nil
local stopped = obj.spec.state == "Stopped"

actions["stop"] = {
  ["disabled"] = stopped or ended or deleting,
  ["iconClass"] = "fa fa-fw fa-stop-circle",
  ["displayName"] = "Stop the agent"
}
actions["restore"] = {
  ["disabled"] = not stopped or ended or deleting,
  ["iconClass"] = "fa fa-fw fa-play-circle",
  ["displayName"] = "Restore and resume the agent"
}
actions["send-message"] = {
  ["disabled"] = ended or deleting,
  ["iconClass"] = "fa fa-fw fa-comment",
  ["displayName"] = "Send a message to the agent",
  ["params"] = {
    {
      ["name"] = "text"
    }
  }
}
local head = nil
if obj.status ~= nil and obj.status.pullRequest ~= nil then
  head = obj.status.pullRequest.headSHA
end
actions["approve"] = {
  ["disabled"] = phase ~= "Mergeable" or head == nil or head == "" or deleting,
  ["iconClass"] = "fa fa-fw fa-check-circle",
  ["displayName"] = "Approve the merge of the pull request's head"
}
return actions
