"""larkgate: a Feishu/Lark agent bot."""

__version__ = "0.1.0"
