"""What the tests share: callers, people, processes, threads and locks."""
