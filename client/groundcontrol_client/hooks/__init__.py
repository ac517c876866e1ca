"""The tool layer on the agent's side: a harness's command hook (`gctl hook HARNESS`,
`command`), what only the agent's disk can tell the server (`disk`), and each harness's hook
configuration written into a project (`install`). The server reads and answers each harness's
own event format (`POST /api/v1/hooks/{harness}`); nothing here parses one.

This package imports nothing it does not need: a hook command starts for every tool call, and
answers from a cold start."""
