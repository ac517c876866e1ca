"""A subprocess agent that knows only GC_URL, GC_KEY and a run id: it claims a slot, works for a
while (heartbeats are the runtime's business, not its own), and finishes with evidence.

    python tests/client/agent.py RUN_ID WORK_SECONDS
"""

import sys
import time

from groundcontrol_client import Hand

run_id, work_s = int(sys.argv[1]), float(sys.argv[2])
with Hand.from_env() as hand, hand.claim(run_id) as attempt:
    print(f"claimed attempt {attempt.id}", flush=True)
    time.sleep(work_s)
    attempt.attach("pull_request", "https://github.com/acme/app/pull/7")
print("finished", flush=True)
