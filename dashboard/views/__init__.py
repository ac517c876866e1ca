"""The supervisors' dashboard: thin views over `dashboard.pages` (reads) and the services (writes).

Every page needs a login and a membership of the current workspace; a viewer reads, a supervisor
acts on attempts, leases and runs, an admin manages hands, keys and members. Objects of another
workspace are a 404, as in the API. Each action goes through a service, which writes its event.
One module per area: `work`, `people`, `records`, over what they share (`base`).
"""
