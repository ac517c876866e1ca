"""The fleet's REST API (CONTRACT.md), one module per area: attempts, runs and slots, resource
leases, records (refusals, events); their inputs, presenters and OpenAPI schemas. Hands, keys and
lanes are `hands.api`; finishing with evidence is `evidence.api`."""
