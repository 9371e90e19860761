"""Small terminal utilities every layer may use: progress bars (:mod:`.progress`) and
aligned text tables (:mod:`.text`). A leaf: imports nothing of pytimings but its errors."""
