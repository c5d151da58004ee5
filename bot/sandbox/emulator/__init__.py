"""A Feishu emulator: Feishu's OpenAPI on localhost, speaking the real wire formats.

The tests run the bot against it (``tests/fakes/feishu_server.py`` re-exports it), and
``larkgate dev`` (:mod:`bot.sandbox`) runs it as the Feishu of the local sandbox. It is a
real HTTP server (aiohttp on 127.0.0.1, a free port), so the code under test runs through
lark-oapi and its HTTP stack unchanged::

    async with FakeFeishu() as fake:                 # app_id "cli_test", secret "secret"
        config = FeishuConfig(app_id=fake.app_id, app_secret=fake.app_secret,
                              verification_token="vt", encrypt_key="ek", domain=fake.domain)
        async with FeishuClient(config) as client:
            await client.reply_message("om_1", msg_type="text", content='{"text":"hi"}')
        assert fake.sent[0].content == {"text": "hi"}
        assert fake.sent[0].reply_to == "om_1"

Endpoints (research/lark-sdk.md §3; bodies parsed whatever the Content-Type says)
    POST  /open-apis/auth/v3/tenant_access_token/internal   flat ``{code,msg,tenant_access_token,
          expire}``; a wrong secret answers 10014, a wrong app id 10003. Like Feishu, the
          current token is handed out again (with its remaining ``expire``) until less
          than ``token_reissue_below`` seconds (30 min) are left; then a new one is issued.
          Tokens live ``token_ttl`` seconds (7200); ``revoke_tokens()`` kills them all.
    GET   /open-apis/bot/v3/info                            ``{code,msg,bot:{...}}`` (no ``data``)
    POST  /open-apis/im/v1/messages?receive_id_type=...     create; ``data`` = the message
    POST  /open-apis/im/v1/messages/{id}/reply              reply; sets root/parent/thread
    PATCH /open-apis/im/v1/messages/{id}                    interactive cards only (230054);
          older than ``edit_window_s`` (14 days) answers 230031
    GET   /open-apis/im/v1/messages/{id}                    ``data.items[0]`` = the message; for a
          merge_forward also what it forwards (``upper_message_id`` set), see "Files"
    GET   /open-apis/im/v1/messages/{id}/resources/{key}?type=image|file   the file's bytes
    POST  /open-apis/im/v1/images, /open-apis/im/v1/files   multipart uploads (see "Files")
    POST  /open-apis/cardkit/v1/cards                       create a card entity; ``data.card_id``
    PUT   /open-apis/cardkit/v1/cards/{card_id}/elements/{element_id}/content   stream text
    PATCH /open-apis/cardkit/v1/cards/{card_id}/settings    ``config`` (streaming_mode, summary)
    PUT   /open-apis/cardkit/v1/cards/{card_id}             replace the whole card
    GET   /open-apis/application/v6/scopes                  ``data.scopes``: the app's scopes
          (``scope_name``, ``grant_status`` 1 = granted, ``scope_type`` tenant), from
          ``granted_scopes`` (every scope larkgate uses unless a test removes some)
    Every route but the token one wants ``Authorization: Bearer <valid token>``: missing
    answers 99991661, unknown/expired/revoked 99991663 (HTTP 400). Unknown routes get
    aiohttp's plain-text 404, as a real gateway answers with a non-JSON page. The routes
    listed under "Acting as a person" take a user token too (some only a user token).
    Per-user OAuth (module ``oauth``; its docstring has the rules): GET
    /open-apis/authen/v1/authorize (302 back with a code; ``consent_as(open_id)``), POST
    /open-apis/authen/v2/oauth/token (code with PKCE, refresh rotation) and GET
    /open-apis/authen/v1/user_info take no tenant token; the last wants a user token.
    The workspace routes (contacts, chat list and history, calendar, tasks, Base, docx) are
    listed under "Workspace" below.
    One-scan app registration (``larkgate setup``; module ``registration``): POST
    /oauth/v1/app/registration (``accounts_url``) and /lark/oauth/v1/app/registration
    (``lark_accounts_url``), init/begin/poll scripted per test with
    ``script_registration("pending", "slow_down", "lark", "success", ...)``; a new app's
    credentials then get tenant tokens (``registered_apps``).

Workspace (``fake.workspace``: :class:`FakeWorkspace`, seeded, every part public state)
    A small tenant the workspace tools read and change: users Alice Wang (ou_fake_alice),
    Bob Li (ou_fake_bob) in department "0" and 张伟 (ou_fake_zhang) in "od-fake-sales";
    chats oc_fake_eng and oc_fake_launch (Alice and Bob; the bot is a member), oc_fake_hr
    (the bot is not), oc_fake_board (Bob alone, with history Alice must never read through
    the bot) and the external oc_fake_partners (Alice and a partner of another tenant),
    with history in oc_fake_eng (text, post, image, a text with an @mention); the bot's
    primary calendar ``BOT_CALENDAR_ID`` (events tomorrow, in 2 days, 3 days ago, a
    cancelled one, an all-day one in 4 days, each with attendees; "Reorg briefing" for Bob
    alone) and a calendar the app may not read; tasks the app created (each with members;
    "Draft the reorg memo" Bob's alone), one a person created, tasklists
    fake-tasklist-launch (shared with oc_fake_launch), fake-tasklist-leads (Bob) and
    fake-tasklist-secret (app not a member); Base bascnFakeProjects / tblFakeTasks (text,
    select, person, number, date, multi select, checkbox, url columns; 4 records; shared
    with Bob and oc_fake_eng, Alice's), bascnFakeLevels (advanced permissions) and
    bascnFakeLocked (no access); docs doxcnFakeHandbook (shared with Alice and
    oc_fake_eng, Bob's), doxcnFakeBudget (Bob's alone), doxcnFakeLaunchPlan (shared with
    oc_fake_launch) and doxcnFakeSecret (no access); folder fldcnFakeShared. Who may see
    what follows Feishu: module ``drive`` answers a document's or Base's collaborators
    and owner. Times are relative to now. ``add_user``, ``add_chat``,
    ``add_event``, ``add_task``, ``add_record``, ``add_document`` seed more.
    Lists answer ``data: {items, has_more, page_token}`` (the token is an offset) and
    check ``page_size`` against Feishu's range (99992402 outside it, or for a bad
    ``user_id_type``, ``page_token`` or missing required parameter).
    POST  /open-apis/contact/v3/users/batch_get_id        ``emails``/``mobiles`` (1-50 each)
          -> ``user_list`` [{email|mobile, user_id?}]; mobiles match with or without +86
    GET   /open-apis/contact/v3/users/batch?user_ids=..   (1-50) -> ``items`` [user]
    GET   /open-apis/contact/v3/users/find_by_department  direct members, page_size <= 50;
          an unknown department answers 40004
    GET   /open-apis/im/v1/chats                          the chats the bot is in, <= 100
    GET   /open-apis/im/v1/chats/{chat_id}                the chat's facts (``external``,
          ``user_count``); the bot not in it 232011, unknown 232006
    GET   /open-apis/im/v1/chats/{chat_id}/members        its people (no bots), paged
          <= 100, ``member_id_type`` (232015), ``tenant_key`` each; 232011 / 232006 as above
    GET   /open-apis/im/v1/messages?container_id_type=chat&container_id=..  sort_type
          ByCreateTimeAsc/Desc, start_time/end_time (seconds), page_size <= 50; the bot
          not in the chat: 230002; a chat nobody knows: 230001. Sent messages show up.
    POST  /open-apis/calendar/v4/calendars/primary         the bot's primary calendar
    GET   .../calendars/{calendar_id}/events               start_time+end_time together
          (one page, cut at page_size, no page_token), else paged; page_size 50-1000;
          unknown calendar 191000, no reader access 191002; cancelled events included
    POST  .../calendars/{calendar_id}/events               TimeInfo checks (timestamp xor
          date; 99992402), end before start 190002, writer access (191002);
          ``idempotency_key`` returns the first event
    POST  .../events/{event_id}/attendees                  user/chat attendees (unknown
          ids 190002, unknown event 193001); inviting someone twice adds nothing
    GET   .../events/{event_id}/attendees                  paged <= 100, people in the
          ``user_id_type`` asked; reader access; unknown event 193001
    GET   /open-apis/task/v1/tasks                         with the tenant token: tasks the
          app created (v1 and v2 share ids here), ``task_completed``
    GET   /open-apis/task/v2/tasklists/{guid}              its ``members`` (users, chats)
          and ``owner``; unknown 1470404, app not a member 1470403
    GET   /open-apis/task/v2/tasklists/{guid}/tasks        unknown 1470404, app not a
          member 1470403; ``completed``
    POST  /open-apis/task/v2/tasks                         summary required, members must
          be known users with role assignee/follower (1470400); ``client_token``
    GET   /open-apis/bitable/v1/apps/{app}                ``app`` with ``is_advanced``
    POST  /open-apis/bitable/v1/apps/{app}/tables/{table}/records/search   view_id,
          field_names (1254024), sort (1254016), filter with and/or conditions (unknown
          field 1254045, bad operator or value 1254018); text cells answer as segments
          and people with names, as Feishu does; ``total``
    POST  /open-apis/bitable/v1/apps/{app}/tables/{table}/records   ``fields`` checked per
          column type (1254060-1254068), unknown column 1254045, new select options
          added; ``client_token``. Unknown app 1254040 / table 1254041 (Base answers its
          errors with HTTP 200), an app without access 91403
    GET   /open-apis/docx/v1/documents/{id}/raw_content   title and block texts, a line each;
          unknown 1770002, no access 1770032
    POST  /open-apis/docx/v1/documents                     title <= 800, folder_token must be
          a known folder (1770001)
    POST  /open-apis/docx/v1/documents/{id}/blocks/{id}/children   the page block only;
          1-50 text/heading/bullet/ordered/code/quote/divider blocks (1770001 otherwise),
          ``index``, ``client_token``; the document's revision goes up
    GET   /open-apis/drive/v1/permissions/{token}/members?type=docx|bitable   direct
          collaborators (module ``drive``: refusals 1063001 / 1063002)
    POST  /open-apis/drive/v1/metas/batch_query            owner and title; ``failed_list``
    Message create refuses a known chat the bot is not in (230002); with ``strict``, an
    unknown chat (230001) or user (230013).

Acting as a person (modules ``identity``, ``freebusy``, ``search``; user tokens from the
fake OAuth above)
    A user token is checked by the middleware: unknown or revoked 99991668, expired
    99991677, the tenant token on a route that takes only a user token 99991668, a user
    token where only the tenant token goes 99991663, and a token without any of the
    route's user scopes 99991679 (the scopes in the message and in
    ``error.permission_violations``). ``identity.USER_ROUTES`` lists the routes and scopes.
    Handlers answer the caller's own data: Alice and Bob each own a primary calendar
    (``workspace.user_calendar(open_id)``; Bob's holds a private "Board prep"), chats
    have ``members`` (Alice is not in oc_fake_hr), documents have ``readers`` (Bob alone
    reads "Board minutes"; "On-call runbook" is a wiki page), and tasks people made
    with their tokens are theirs.
    POST  /open-apis/calendar/v4/calendars/primary        with a user token: theirs
    GET/POST .../calendars/{id}/events, .../attendees     the person's role on the
          calendar (``user_roles``): none on anyone else's calendar (191002)
    POST  /open-apis/calendar/v4/freebusy/batch           busy times only (``freebusy``)
    GET   /open-apis/task/v2/tasks                        user only: the tasks assigned to
          the caller (``type`` my_tasks, ``completed``)
    POST  /open-apis/task/v2/tasks                        a user token makes it theirs
    PATCH /open-apis/task/v2/tasks/{guid}                 ``update_fields`` completed_at,
          summary, description; creator or member only (1470403), else 1470400/1470404
    POST  /open-apis/search/v2/doc_wiki/search            user only (``search``)
    POST  /open-apis/search/v2/message                    user only: message ids of the
          caller's chats, newest first
    GET   /open-apis/im/v1/messages/mget                  the caller's chats' messages
          (the bot's chats with the tenant token)

Messages
    ``uuid`` is honoured: a second create/reply with a uuid already seen returns the first
    message and adds nothing. Content must be a JSON string (else 230001); over 150 KB
    (text) or 30 KB (post, interactive) answers 230025. A reply to a message in a topic
    (``thread_id``) stays in it; ``reply_in_thread`` on a plain message starts a topic.
    Replying to an id the fake has never seen creates that parent on the fly, in chat
    ``default_chat_id``, unless ``strict = True`` (then 230001). Seed real parents with
    ``add_message(...)`` or ``add_event_message(envelope)`` (an envelope from
    ``bot.sandbox.push.message_event``) to get their chat and thread right. A message sent
    to a person (``receive_id_type`` other than ``chat_id``) lands in their direct chat with
    the bot: ``dm_chats[receive_id]`` when set (the sandbox maps its people to the DMs its
    page shows), else ``oc_p2p_<receive_id>``.

Files (modules ``resources``, ``uploads``, ``inbound``; their docstrings give every rule)
    Seed messages with files, in Feishu's shapes, and their bytes:
    ``add_image_message(id, chat_id=, data=)``, ``add_file_message(..., file_name=)``,
    ``add_audio_message(..., duration_ms=)``, ``add_post_message(..., text=, images=[...])``,
    ``add_sticker_message(...)``, ``add_merge_forward(id, chat_id=, messages=[...])`` (the
    forwarded messages' files are served through the forward's id, never their own), or
    ``add_resource(message_id, key, data, kind=, content_type=, file_name=,
    content_disposition=)`` for any message; ``message_event(message)`` is the receive
    envelope to push. Refusals: 234001 (type), 234003 (key not in the message, unknown or
    recalled message, a forwarded message's own id), 234004 (bot not in the chat), 234043
    (sticker, card). ``FakeResource.served`` says how much of each answer was written;
    ``resource_fault(message_id, key, mode=)`` with mode ``hold_body`` (headers, then no
    body until the client hangs up), ``chunked`` (no Content-Length), ``understated`` /
    ``overstated`` (``claimed=`` Content-Length) makes answers misbehave.
    Uploads land in ``uploaded_images[image_key]`` / ``uploaded_files[file_key]`` (bytes,
    fields, the part's filename). Sending ``msg_type`` image/file/audio/media/sticker needs
    its ``image_key``/``file_key`` (230001 without), and a key Feishu knows: uploaded, or
    of a seeded message (230001 otherwise).

CardKit (research/lark-sdk.md §2.5, §3 rows 10-13)
    Create takes ``{"type": "card_json", "data": "<card JSON>"}`` and checks, in order:
    valid JSON (200220), not empty (300307), ≤ ``card_size_limit`` bytes (30 KB, 200860),
    ``schema == "2.0"`` (300303), ``config.update_multi`` not false (300302), ≤ 200
    components (dicts with a ``tag`` under ``body``; 300305), unique ``element_id`` values
    (300301). Card ids look like Feishu's (``"7355..."``). Streaming is on when the card's
    ``config.streaming_mode`` is true, at creation or later through settings or update.
    Content, settings and update ("card ops") check, in order: the card exists (200740);
    the per-card rate limit (230020); the body; a ``uuid`` already used on this card for
    the same op and body answers success and changes nothing (another body: 200770);
    then per op:
      content   the element exists (300313) and is ``markdown``/``plain_text`` (300310);
                streaming is on (300309), and not older than ``stream_timeout_s`` (600 s;
                past it: 200850 once, then 300309); ``sequence`` > the card's last (300317);
                content is a string of 1..100000 characters (99992402).
      settings  ``settings`` is a JSON object string (99992402); ``sequence`` (300317);
                ``config`` keys are merged into the card's config (``streaming_mode``,
                ``summary``, ...); other top-level keys than ``config``/``card_link`` are
                ignored, like Feishu ignores a bare ``{"streaming_mode": false}``.
      update    ``{"card": {"type": "card_json", "data": str}}``, ``sequence`` (300317), then
                create's checks; the new card replaces the old, its config included.
    A refused op changes nothing (``last_sequence`` included). Sending an entity:
    create/reply with ``msg_type: "interactive"`` and content
    ``{"type": "card", "data": {"card_id": ...}}``. An unknown card or one already sent
    answers 230099 (a resend with the same message ``uuid`` returns the first message).
    Rate limit: a card op is refused with 230020 when ``card_ops_limit`` (10) ops were
    already admitted on that card within the last ``card_ops_window_s`` (1.0) seconds of
    ``clock`` (admitted = not refused by this limit; failures for other reasons count).
    Card times use ``clock``, ``time.monotonic`` unless given (``FakeFeishu(clock=...)``
    or set the attribute), so tests step time instead of sleeping. Tokens and message
    timestamps keep the real clocks.

Inspection
    ``requests``        every request, in order (:class:`RecordedRequest`: method, path,
                        query, headers (case-insensitive), body bytes, json, peer address)
    ``sent``            the messages the bot created or replied, in order (:class:`FakeMessage`:
                        chat_id, reply_to, root_id, parent_id, thread_id, msg_type, content
                        (decoded JSON), uuid, reply_in_thread, history of patched contents)
    ``message_by_id``   every message the fake knows, seeded ones included
    ``count(method, path_regex)``, ``token_requests``
    ``revision``        goes up after every request it answers (and ``touch()``);
                        ``await wait_for_change(revision, within)`` waits for the next
    ``max_recorded``    keep only the last N ``requests`` (None, the default: all of them;
                        a long-running sandbox sets a cap)
    ``cards``           card_id → :class:`FakeCard`: ``card`` (the current card JSON, element
                        contents updated by content PUTs), ``last_sequence``,
                        ``streaming_mode``, ``summary``, ``message_id`` it was sent in,
                        ``timeline`` (:class:`CardOp`: time, op, sequence, element_id, text,
                        code; every op that reached the card, refused ones included), and
                        ``settings_history`` (each settings object as sent)
    ``card_text(card_id, element_id)``   the element's current text
    ``max_ops_per_second(card_id)``      the most card ops (content/settings/update, refused
                                         ones included) in any ``card_ops_window_s`` window
    ``rate_limited``    the card ops refused with 230020, in order
    A sent card message has ``card_id`` set (:class:`FakeMessage`).

Faults and delays
    ``fail(method, path_regex, code, *, http_status=400, msg=None, times=1, delay=0.0,
    raw_body=None, error=None)`` answers the next ``times`` matching requests (``None``:
    all of them) with ``{"code", "msg", "error": {"log_id", **error}}`` and an
    ``X-Tt-Logid`` header, after ``delay`` seconds; HTTP 429 also carries the
    ``x-ogw-ratelimit-*`` headers. ``raw_body`` sends that text instead, as ``text/html``
    (a gateway's 502 page). ``slow(method, path_regex, seconds, times=None)`` delays
    matching requests, which are then answered normally. ``hold(method, path_regex,
    times=1)`` keeps matching requests unanswered until the returned hold's ``release()``
    (its ``arrived`` event is set once one waits): a test acts while a call is in flight.
    ``method`` may be ``"*"``;
    ``path_regex`` is searched in the path (no query). Faults are checked before the
    token, as a gateway would, and work on every route, e.g.
    ``fail("PUT", r"/elements/.+/content$", 230020)``. An injected fault leaves no
    trace on the card (its timeline and sequence are untouched).
    ``deny_scopes(method, path_regex, scopes, times=None)`` answers matching requests as
    Feishu's gateway does when the app lacks a scope (any one of ``scopes`` would do):
    99991672, HTTP 400, the scopes in the message ("Access denied. One of the following
    scopes is required: [a, b]." then the same in Chinese with the console's auth link)
    and in ``error.permission_violations``.

Extending (CardKit and more)
    One module per API family: ``auth``, ``messages``, ``resources``, ``uploads``,
    ``inbound``, ``cardkit`` (mixins of
    :class:`FakeFeishu` over the shared state of ``core``; ``faults`` holds the test
    controls, ``server`` the route table and middleware) and the workspace's ``contacts``,
    ``chats``, ``calendars``, ``tasks``, ``bitable`` and ``docx`` (mixins of
    :class:`FakeWorkspace` over ``workspace_state``; seed and routes in ``workspace``).
    Add a handler method to its family, register it in ``FakeFeishu._routes()`` (or
    ``FakeWorkspace.routes()``), read the parsed body from ``request_body(request)``
    (``wire``), answer with ``_ok(data)`` and refuse with ``raise FakeError(code)`` (the
    middleware renders it, with a log id). Keep state in dataclasses on the fake.
    ``paged`` and ``query_int`` (``params``) give the workspace endpoints Feishu's paging
    and parameter checks.
    ``add_routes(routes, public=True)`` (before ``start()``) mounts routes served elsewhere,
    such as the long-connection gateway of ``fakes.feishu_ws``, on the same domain.
"""

from .messages import FakeMessage
from .resources import FakeResource, ServedBody
from .server import FakeFeishu
from .uploads import UploadedFile, UploadedImage
from .workspace_state import BOT_CALENDAR_ID

# What is imported from bot.sandbox.emulator today (bot/sandbox, tests/fakes/feishu_server).
__all__ = [
    "BOT_CALENDAR_ID",
    "FakeFeishu",
    "FakeMessage",
    "FakeResource",
    "ServedBody",
    "UploadedFile",
    "UploadedImage",
]
