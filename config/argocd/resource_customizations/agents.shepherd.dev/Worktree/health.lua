-- Health of a Shepherd Worktree (agents.shepherd.dev/v1alpha1), for Argo CD. Base and table
-- libraries only (see AgentSession/health.lua). Ready or Removed is Healthy, unless the setup
-- commands failed (Degraded: the checkout is there, the environment is not); Stalled True (no
-- usable checkout) is Degraded; deletion is Progressing and says what it waits for (a bound
-- session, unpushed commits) and which finalizers; anything else is Progressing.
-- Shepherd's docs/gitops.md has the table.
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
  local msg = "Deleting"
  if #names > 0 then
    msg = "Deleting; waiting for finalizers: " .. table.concat(names, ", ")
  end
  local blocked = condition("DeletionBlocked")
  if blocked ~= nil and blocked.status == "True" then
    msg = msg .. " (" .. message(blocked, "deletion is blocked") .. ")"
  end
  hs.message = msg
  return hs
end

local ready = condition("Ready")
if obj.status == nil or ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for Shepherd to observe the worktree"
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
  hs.message = message(stalled, "No usable checkout")
  return hs
end
local setup = condition("SetupSucceeded")
if setup ~= nil and setup.status == "False" and setup.reason == "SetupFailed" then
  hs.status = "Degraded"
  hs.message = message(setup, "The setup commands failed")
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = message(ready, obj.status.phase)
  return hs
end
hs.status = "Progressing"
hs.message = message(condition("Reconciling"), message(ready, "Reconciling"))
return hs
