-- Runs the session again: Shepherd restores the checkout and resumes the agent's conversation.
obj.spec.state = "Running"
return obj
