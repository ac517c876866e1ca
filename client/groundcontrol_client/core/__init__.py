"""The client's sans-I/O core: the contract's calls as steps (requests and answers, no
sending), the errors and their sentences, the wire models, the tenure clock and the rules a
client decides by. The shells (`groundcontrol_client.http`, `.runtime`) do the waiting."""
