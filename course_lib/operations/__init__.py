"""Running the model in production (notebook 08): what happens around a deployed model.

One module per job, each small and plain:

- ``replay``: serve a fixed input set on one "deployment" (a model and its decoding) and score it;
- ``drift``: a paired comparison of two replays (the real delta and its interval) and the spread
  of repeated sampled trials (the noise);
- ``routing``: a router by task priced per successful task, and a fallback chain that moves on only
  for outages and invalid replies;
- ``monitoring``: trace-log lines joined with their replies into events, and rates by slice with
  alert thresholds and a minimum count;
- ``rollout``: sticky canary arms by a salted hash of the user id, a stop rule, and a deployment
  pointer that rolls back in one assignment while in-flight requests finish on their arm;
- ``stream_filter``: a banned-phrase filter on a token stream, with the hold-back it needs;
- ``approval``: a material effect (the refund tool) behind a confirmation bound to the user and
  the exact call;
- ``memory``: a long tool-using conversation under a token budget: drop, summarise or re-retrieve;
- ``verbal``: what a reply's words say about its certainty, beside what its probability says.
"""
