"""A transactional id claimed for one term of a lease (a live join view's, :mod:`cdc.views`).

The holder of a lease claims the id at the start of each term: its ``init_transactions`` fences
every older producer of the id, so a holder that was paused past its session and wakes mid-batch
cannot commit once the new holder has claimed (its commit fails as fenced). The claim makes one
producer only: once that producer is gone (fenced, failed, or a commit of unknown outcome) the
claim is :attr:`ClaimedWriter.spent`, its transactions fail to begin, and its holder must end
its term and win the lease again before it claims anew; a fresh producer made on its own would
fence the id's newer holder back.
"""

from __future__ import annotations

from collections.abc import Callable

from cdc.log.kafka.txn import KafkaTransaction, TransactionalWriter, TransactionLog


class ClaimedWriter:
    """Transactions of one claim of a transactional id (:meth:`KafkaLog.claim_writer`).

    Args:
        log: what its transactions need of the log.
        writer: the once-only writer, whose ``init_transactions`` already ran.
        forget: called when the claim is closed (the log stops tracking the writer).
    """

    def __init__(
        self, log: TransactionLog, writer: TransactionalWriter, forget: Callable[[], None]
    ) -> None:
        self._log = log
        self._writer = writer
        self._forget = forget

    @property
    def transactional_id(self) -> str:
        """The id claimed."""
        return self._writer.transactional_id

    @property
    def spent(self) -> bool:
        """Whether the claim's producer is gone: every later :meth:`begin` fails."""
        return self._writer.spent

    def begin(self) -> KafkaTransaction:
        """Start a transaction with the claim's producer.

        Raises:
            WriterSpent: the producer is gone (:attr:`spent`); the holder's term is over.
        """
        return KafkaTransaction(self._log, self._writer)

    def close(self) -> None:
        """Drop the producer (an open transaction is aborted by the broker or the next claim)."""
        try:
            self._writer.close()
        finally:
            self._forget()
