"""Draft proposers for the native engine, one per module (see :mod:`tltreal.spec_decode.proposers.base`)."""

from tltreal.spec_decode.proposers.base import DraftModel, ProposalContext, TokenProposer, catch_up
from tltreal.spec_decode.proposers.eagle import EagleDrafter, random_drafter
from tltreal.spec_decode.proposers.ngram import NgramProposer
from tltreal.spec_decode.proposers.oracle import OracleDrafter
from tltreal.spec_decode.proposers.pinned import PinnedDrafter

__all__ = ["DraftModel", "EagleDrafter", "NgramProposer", "OracleDrafter", "PinnedDrafter", "ProposalContext",
           "TokenProposer", "catch_up", "random_drafter"]
