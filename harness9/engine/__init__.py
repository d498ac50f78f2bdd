"""The agent loop. Talks to the UI only through events (harness9.engine.events)."""

from harness9.engine.breakdown import ContextBreakdown
from harness9.engine.engine import AgentEngine, EngineOptions, TurnResult
from harness9.engine.prompt import PromptBuilder

__all__ = ["AgentEngine", "ContextBreakdown", "EngineOptions", "PromptBuilder", "TurnResult"]
