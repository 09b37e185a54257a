-- Appends a message for the agent; Shepherd delivers it once, as a new turn of the conversation.
-- The id is unique per session: the time to the second and the message's position.
local os = require("os")

local text = actionParams["text"]
if text == nil or text == "" then
  error("the message is empty: give the text parameter", 0)
end
if obj.spec.messages == nil then
  obj.spec.messages = {}
end
local n = #obj.spec.messages + 1
if n > 100 then
  error("the session already holds 100 messages, the most spec.messages takes", 0)
end
local id = "argocd-" .. os.date("!%Y%m%d-%H%M%S") .. "-" .. n
table.insert(obj.spec.messages, { id = id, text = text, from = "argocd" })
return obj
