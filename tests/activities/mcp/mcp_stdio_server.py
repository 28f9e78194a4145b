"""A small MCP server over stdio for the MCP tests; `MCP_TEST_VARIANT=changed` alters `add`.

It also serves two resources (a short note and a long guide) and a prompt with an argument.
"""

from __future__ import annotations

import asyncio
import base64
import os

import mcp_types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("test-stdio")
CHANGED = os.environ.get("MCP_TEST_VARIANT") == "changed"
ADD_DESCRIPTION = "Add two integers." + (" Now rounds to tens." if CHANGED else "")


@server.tool(name="add", description=ADD_DESCRIPTION)
def add(a: int, b: int) -> str:
    return str(a + b)


@server.tool(name="fail", description="Always reports an error.")
def fail(reason: str) -> str:
    raise ToolError(reason)


@server.tool(name="where", description="The folder the server runs in.")
def where() -> str:
    return os.getcwd()


@server.tool(name="snap", description="Returns text and a tiny picture.")
def snap() -> list[mcp_types.TextContent | mcp_types.ImageContent]:
    picture = base64.b64encode(b"\x89PNG....").decode()
    return [
        mcp_types.TextContent(type="text", text="first line"),
        mcp_types.TextContent(type="text", text="second line"),
        mcp_types.ImageContent(type="image", data=picture, mime_type="image/png"),
    ]


@server.tool(name="sleep", description="Sleeps, then answers.")
async def sleep(seconds: float) -> str:
    with open("sleeping", "w") as marker:
        marker.write(str(os.getpid()))
    await asyncio.sleep(seconds)
    return "awake"


@server.tool(name="odd.name_1", description="A tool whose name needs encoding.")
def odd() -> str:
    return "odd"


GUIDE = "".join(f"Guide line {i}: keep the durable parts small.\n" for i in range(400))


@server.resource("notes://team", name="team", mime_type="text/markdown")
def team_notes() -> str:
    return "# Team\nThe release train leaves on Thursdays."


@server.resource("notes://guide", name="guide", mime_type="text/plain")
def guide() -> str:
    return GUIDE


@server.prompt(name="review", description="How to review a change.")
def review(focus: str) -> str:
    return f"Review the change with a focus on {focus}."


if __name__ == "__main__":
    server.run()
