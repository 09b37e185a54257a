-- Stops the session: Shepherd removes the agent pod and keeps the worktree and the conversation.
obj.spec.state = "Stopped"
return obj
