"""The runtime around an agent: tenures kept alive for it (`Hand`, `AsyncHand`), and around a
command (`gctl run`/`hold`: `wrappers`, `lifeline`)."""
