"""What "right" means, computed from scratch: per-call references (``reference``), dense
draft tokens (``reference_drafts``), comparison with margin-aware tolerance (``compare``),
plain-list cases (``cases``), the weak spots a call exercised (``coverage``), and how
sensitive the tiny model is to one wrong input (``sensitivity``). Imports only ``sim.models``."""
