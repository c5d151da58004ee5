"""The Feishu workspace as tools on the bot's tenant token, one module per API family."""

from .bitable import BitableCondition
from .settings import FeishuWorkspaceSettings
from .workspace import FeishuWorkspace

__all__ = ["BitableCondition", "FeishuWorkspace", "FeishuWorkspaceSettings"]
