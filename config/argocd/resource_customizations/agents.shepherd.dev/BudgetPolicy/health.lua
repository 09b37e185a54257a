-- Health of a Shepherd BudgetPolicy (agents.shepherd.dev/v1alpha1), for Argo CD. Base and table
-- libraries only (see AgentSession/health.lua). Ready True is Healthy while the shared cap has
-- room, Suspended once it is spent (BudgetAvailable False: the covered Projects' new sessions
-- wait until the window resets, by design, not a fault); Stalled True (a selector or a time zone
-- that does not parse) is Degraded; anything else is Progressing. Shepherd's docs/gitops.md has
-- the table.
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

local ready = condition("Ready")
if obj.status == nil or ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for Shepherd to observe the budget policy"
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
  hs.message = message(stalled, "The budget policy needs a fix")
  return hs
end
local budget = condition("BudgetAvailable")
if ready.status == "True" and budget ~= nil and budget.status == "False" then
  hs.status = "Suspended"
  hs.message = message(budget, "The budget is spent")
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = message(budget, message(ready, "Ready"))
  return hs
end
hs.status = "Progressing"
hs.message = message(condition("Reconciling"), message(ready, "Reconciling"))
return hs
