-- A human approves the merge from Argo CD: the annotation names the head commit approved.
-- Shepherd merges that head when the session is Mergeable (checks passing at that head, the
-- forge able to merge); a push after the approval needs a new one.
local head = nil
if obj.status ~= nil and obj.status.pullRequest ~= nil then
  head = obj.status.pullRequest.headSHA
end
if obj.status == nil or obj.status.phase ~= "Mergeable" or head == nil or head == "" then
  error("only a Mergeable session's pull request can be approved", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["agents.shepherd.dev/approved-head"] = head
return obj
