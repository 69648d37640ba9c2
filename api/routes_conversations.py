"""Conversations and feedback: a caller's own conversations, and what they thought of answers.

A conversation is visible to the caller who started it (the same principal, signed in the same
way: see ``conversations.Viewer``) and to nobody else: anyone else gets 404, exactly as for one
that never existed. Its turns are shown through the caller's rights of today: a turn citing a
document they can no longer read is withheld.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from citewise.api.auth import caller
from citewise.api.conversations import Viewer
from citewise.api.identity.caller import Caller
from citewise.api.openapi import problems
from citewise.api.schemas import ResponseBody
from citewise.retrieval.answering import Answer

router = APIRouter(prefix="/v1", tags=["conversations"])

# Anyone but its owner gets this too, exactly as for a conversation that never existed.
NO_CONVERSATION = problems({404: "No such conversation of the caller's (another's, or one "
                                 "that ended after a while without questions)."})

CONVERSATION_ID = r"^[0-9a-f]{32}$"


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={
        "examples": [{"helpful": False, "comment": "step 2 is outdated", "wrong_citation": 2,
                      "right_document": "runbooks/redis-cache-failover.md"}]})

    helpful: bool
    comment: str | None = Field(default=None, max_length=2000)
    wrong_citation: int | None = Field(default=None, ge=1, le=100,
                                       description="The [n] that points at the wrong place.")
    right_document: str | None = Field(
        default=None, max_length=1000,
        description="Not helpful, and the right document was this: its path, "
        "`<source>/<path>` or link, as you know it. `citewise feedback export --golden` turns "
        "it into a golden-set entry that evaluation and the learned ranking learn from.")


class ConversationSummary(ResponseBody):
    id: str
    title: str = Field(description="Its first question.")
    created_at: str
    updated_at: str
    turns: int


class ConversationList(ResponseBody):
    conversations: list[ConversationSummary]


class TurnView(ResponseBody):
    answer_id: str
    turn: int
    question: str = Field(description="As asked.")
    standalone_question: str = Field(description="As searched: a follow-up rewritten to "
                                     "stand alone.")
    created_at: str
    answer: Answer
    withheld: bool = Field(description="It cites a document the caller may no longer read: "
                           "its answer text is not shown.")
    withheld_reason: str | None = Field(default=None, description="Only when withheld.")


class ConversationView(ResponseBody):
    id: str
    owner: str
    title: str
    created_at: str
    updated_at: str
    turns: list[TurnView]


class FeedbackView(ResponseBody):
    answer_id: str
    helpful: bool
    comment: str | None
    wrong_citation: int | None
    right_document: str | None = None
    created_at: str


@router.get("/conversations", response_model=ConversationList, summary="Your conversations")
def list_conversations(request: Request, who: Annotated[Caller, Depends(caller)],
                       limit: Annotated[int, Query(ge=1, le=200)] = 50) -> dict:
    """The caller's live conversations, most recent first."""
    conversations = request.app.state.services.conversations
    return {"conversations": conversations.owned_by(Viewer.of(who), limit)}


# Unset fields are left out: a turn that is not withheld has no withheld_reason.
@router.get("/conversations/{conversation_id}", response_model=ConversationView,
            response_model_exclude_unset=True, summary="One conversation with its turns",
            responses=NO_CONVERSATION)
def get_conversation(request: Request, who: Annotated[Caller, Depends(caller)],
                     conversation_id: Annotated[str, Path(pattern=CONVERSATION_ID)]) -> dict:
    """Each turn: the question as asked, as searched, and the answer with its citations; a turn
    citing a document the caller may no longer read has `withheld: true` and no answer text."""
    return request.app.state.services.conversations.get(conversation_id, Viewer.of(who))


@router.delete("/conversations/{conversation_id}", status_code=204,
               summary="Forget a conversation", responses=NO_CONVERSATION)
def delete_conversation(request: Request, who: Annotated[Caller, Depends(caller)],
                        conversation_id: Annotated[str, Path(pattern=CONVERSATION_ID)]
                        ) -> Response:
    request.app.state.services.conversations.delete(conversation_id, Viewer.of(who))
    return Response(status_code=204)


@router.post("/answers/{answer_id}/feedback", status_code=201, response_model=FeedbackView,
             summary="Feedback on an answer",
             responses=problems({404: "No such answer of the caller's."}))
def feedback(answer_id: Annotated[str, Path(pattern=CONVERSATION_ID)], body: FeedbackRequest,
             request: Request, who: Annotated[Caller, Depends(caller)]) -> dict:
    """Helpful or not, with a comment, the citation that was wrong and the document that
    was right; kept with the question, the answer and its citations (`citewise feedback
    export --golden` turns them into golden-set entries)."""
    return request.app.state.services.conversations.feedback(
        answer_id, Viewer.of(who), helpful=body.helpful, comment=body.comment,
        wrong_citation=body.wrong_citation, right_document=body.right_document)
