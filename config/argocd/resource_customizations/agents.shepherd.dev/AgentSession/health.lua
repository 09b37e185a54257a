-- Health of a Shepherd AgentSession (agents.shepherd.dev/v1alpha1), for Argo CD.
-- Uses only the base and table libraries: Argo CD runs argocd-cm health scripts without the
-- standard libraries unless useOpenLibs is set. The mapping is the table in Shepherd's
-- docs/gitops.md:
--   Merged, Done                                   Healthy
--   Stopped (spec.state Stopped)                    Suspended
--   NeedsInput, or a human's judgment needed        Suspended   (waiting is not a failure)
--   Errored, Stuck, stalled on anything else        Degraded    (a missing Project or Worktree,
--                                                                an invalid spec, ...)
--   any other live phase                            Progressing
--   being deleted                                   Progressing (names the finalizers)
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
  local names = {}
  if obj.metadata.finalizers ~= nil then
    for _, f in ipairs(obj.metadata.finalizers) do
      table.insert(names, f)
    end
  end
  if #names > 0 then
    hs.message = "Deleting; waiting for finalizers: " .. table.concat(names, ", ")
  else
    hs.message = "Deleting"
  end
  return hs
end

if obj.status == nil or obj.status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for Shepherd to observe the session"
  return hs
end

local phase = obj.status.phase
local ready = condition("Ready")
local stalled = condition("Stalled")
local reconciling = condition("Reconciling")
local attention = condition("NeedsAttention")

if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= nil and
    obj.status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for Shepherd to act on generation " .. obj.metadata.generation .. " (" .. phase .. ")"
  return hs
end

if phase == "Merged" or phase == "Done" then
  hs.status = "Healthy"
  hs.message = message(ready, phase)
  return hs
end
if phase == "Stopped" then
  hs.status = "Suspended"
  hs.message = message(ready, "The session is Stopped")
  return hs
end
if phase == "Errored" or phase == "Stuck" then
  hs.status = "Degraded"
  hs.message = message(stalled, message(ready, phase))
  return hs
end
if phase == "NeedsInput" then
  hs.status = "Suspended"
  hs.message = message(stalled, message(ready, "The agent waits for an answer"))
  return hs
end
if stalled ~= nil and stalled.status == "True" then
  -- A human is asked to act (the phase's reaction is not SendToAgent, or it escalated): the
  -- session waits, it has not failed. Stalled for any other reason is a failure to fix.
  if stalled.reason == "AwaitingHuman" or stalled.reason == "Escalated" then
    hs.status = "Suspended"
  else
    hs.status = "Degraded"
  end
  hs.message = message(stalled, phase)
  return hs
end
if attention ~= nil and attention.status == "True" then
  hs.status = "Suspended"
  hs.message = message(attention, phase)
  return hs
end
hs.status = "Progressing"
hs.message = message(reconciling, message(ready, phase))
return hs
