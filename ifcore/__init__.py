"""ifcore: scope-aware instruction following. Constraints as data (ScopeIF's Scope / Target / Range schema),
deterministic verification, graded rewards and RL training (ScopeIF, RAIF, RTT).

The core (schema, text, verify, rewards, advantages) imports neither torch nor the trainer.
"""
from ifcore.schema import Constraint, ConstraintError, parse_label
from ifcore.text import Doc
from ifcore.verify import Record, Verdict, verify, verify_all

__all__ = ["Constraint", "ConstraintError", "Doc", "Record", "Verdict", "parse_label", "verify", "verify_all"]
__version__ = "0.1.0"
