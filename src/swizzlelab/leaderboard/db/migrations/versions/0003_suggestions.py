"""Suggestions (issue 48): which block order would make a submission's kernel faster, a job of its own claimed
after every submission's job, and its result.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('suggestions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('submission_id', sa.Integer(), nullable=False),
    sa.Column('requested_by', sa.String(length=128), nullable=False),
    sa.Column('measure', sa.Boolean(), nullable=False),
    sa.Column('gpu_type', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('claimed_by', sa.String(length=128), nullable=False),
    sa.Column('claim_token', sa.String(length=64), nullable=False),
    sa.Column('claimed_at', sa.DateTime(), nullable=True),
    sa.Column('heartbeat_at', sa.DateTime(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.Column('headline', sa.Text(), nullable=False),
    sa.Column('note', sa.Text(), nullable=False),
    sa.Column('gpu', sa.String(length=128), nullable=False),
    sa.Column('result', sa.JSON(), nullable=False),
    sa.Column('patched_code', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['submission_id'], ['submissions.id'], name=op.f('fk_suggestions_submission_id_submissions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_suggestions')),
    sa.UniqueConstraint('submission_id', name=op.f('uq_suggestions_submission_id'))
    )
    with op.batch_alter_table('suggestions', schema=None) as batch_op:
        batch_op.create_index('ix_suggestions_status_id', ['status', 'id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('suggestions', schema=None) as batch_op:
        batch_op.drop_index('ix_suggestions_status_id')

    op.drop_table('suggestions')
