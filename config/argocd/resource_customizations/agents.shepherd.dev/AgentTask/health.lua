-- Health of a Shepherd AgentTask (agents.shepherd.dev/v1alpha1), for Argo CD. Base and table
-- libraries only (see AgentSession/health.lua). A task whose chosen pull request merged is
-- Healthy; one that waits for a person's pick is Suspended (by design: the Human policy, or the
-- cost cap reached); Failed (no attempt to choose, the chosen one lost) and Stalled are Degraded;
-- attempts at work or a chosen pull request on its way to merge are Progressing. Shepherd's
-- docs/gitops.md has the table.
-- Each script stands alone (Argo CD loads no shared Lua), so the small helpers repeat.
local hs = {}

local function condition(ctype)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == ctype then
      return c
    end
  end
  return nil
end

local function message(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

if obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Deleting"
  return hs
end

local ready = condition("Ready")
if obj.status == nil or ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for Shepherd to observe the task"
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= nil and
    obj.status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for Shepherd to act on generation " .. obj.metadata.generation
  return hs
end

local stalled = condition("Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = message(stalled, "The task needs a fix")
  return hs
end
local phase = obj.status.phase
if phase == "Merged" then
  hs.status = "Healthy"
elseif phase == "Failed" then
  hs.status = "Degraded"
elseif phase == "WaitingForPick" then
  hs.status = "Suspended"
else
  hs.status = "Progressing"
end
hs.message = message(ready, phase or "Reconciling")
return hs
