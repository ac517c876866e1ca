"""Attempts: a hand's tenure on a slot, from its claim through its reports and heartbeats to its
end; handoffs of slots; idle attempts and their sweep."""
