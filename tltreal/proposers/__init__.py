"""Draft proposers for the native engine, one per module (see :mod:`tltreal.proposers.base`)."""

from tltreal.proposers.base import DraftModel, ProposalContext, TokenProposer, catch_up
from tltreal.proposers.eagle import EagleDrafter, random_drafter
from tltreal.proposers.ngram import NgramProposer
from tltreal.proposers.oracle import OracleDrafter
from tltreal.proposers.pinned import PinnedDrafter

__all__ = ["DraftModel", "EagleDrafter", "NgramProposer", "OracleDrafter", "PinnedDrafter", "ProposalContext",
           "TokenProposer", "catch_up", "random_drafter"]
