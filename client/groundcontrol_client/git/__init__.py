"""Files and repositories: one lease name per file (`files`), and fences judged where commits
land (`fences`: the git hooks, push receipts, `gctl verify`).

Imports nothing itself: a harness's hook command names files from a cold start."""
