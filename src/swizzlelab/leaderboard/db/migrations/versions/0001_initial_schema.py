"""Initial leaderboard schema: users, api_tokens, leaderboards, code_files, submissions, jobs, runs, profile_files,
rate_limits (times are UTC without a zone; see models.UTCDateTime).

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('code_files',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('code', sa.Text(), nullable=False),
    sa.Column('size_bytes', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_code_files')),
    sa.UniqueConstraint('sha256', name=op.f('uq_code_files_sha256'))
    )
    op.create_table('leaderboards',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('task', sa.String(length=64), nullable=False),
    sa.Column('gpu_type', sa.String(length=32), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('deadline', sa.DateTime(), nullable=True),
    sa.Column('secret_seed', sa.BigInteger(), nullable=False),
    sa.Column('ranking_rule', sa.String(length=32), nullable=False),
    sa.Column('visible', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_leaderboards')),
    sa.UniqueConstraint('name', name=op.f('uq_leaderboards_name')),
    sa.UniqueConstraint('task', 'gpu_type', name='uq_leaderboards_task_gpu')
    )
    with op.batch_alter_table('leaderboards', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_leaderboards_task'), ['task'], unique=False)

    op.create_table('users',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('is_admin', sa.Boolean(), nullable=False),
    sa.Column('banned', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
    sa.UniqueConstraint('name', name=op.f('uq_users_name'))
    )
    op.create_table('api_tokens',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('token_sha256', sa.String(length=64), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('revoked', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_api_tokens_user_id_users')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_tokens')),
    sa.UniqueConstraint('token_sha256', name=op.f('uq_api_tokens_token_sha256'))
    )
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_api_tokens_user_id'), ['user_id'], unique=False)

    op.create_table('rate_limits',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('leaderboard_id', sa.Integer(), nullable=True),
    sa.Column('mode', sa.String(length=16), nullable=True),
    sa.Column('max_submissions', sa.Integer(), nullable=False),
    sa.Column('window_s', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['leaderboard_id'], ['leaderboards.id'], name=op.f('fk_rate_limits_leaderboard_id_leaderboards')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_rate_limits')),
    sa.UniqueConstraint('leaderboard_id', 'mode', name='uq_rate_limits_lb_mode')
    )
    op.create_table('submissions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('leaderboard_id', sa.Integer(), nullable=False),
    sa.Column('code_id', sa.Integer(), nullable=False),
    sa.Column('filename', sa.String(length=255), nullable=False),
    sa.Column('mode', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('passed', sa.Boolean(), nullable=True),
    sa.Column('score_ms', sa.Float(), nullable=True),
    sa.Column('flagged', sa.Boolean(), nullable=False),
    sa.Column('flag_reason', sa.Text(), nullable=False),
    sa.Column('error', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['code_id'], ['code_files.id'], name=op.f('fk_submissions_code_id_code_files')),
    sa.ForeignKeyConstraint(['leaderboard_id'], ['leaderboards.id'], name=op.f('fk_submissions_leaderboard_id_leaderboards')),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_submissions_user_id_users')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_submissions'))
    )
    with op.batch_alter_table('submissions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_submissions_created_at'), ['created_at'], unique=False)
        batch_op.create_index('ix_submissions_lb_user', ['leaderboard_id', 'user_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_submissions_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_submissions_user_id'), ['user_id'], unique=False)

    op.create_table('jobs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('submission_id', sa.Integer(), nullable=False),
    sa.Column('mode', sa.String(length=16), nullable=False),
    sa.Column('secret', sa.Boolean(), nullable=False),
    sa.Column('gpu_type', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('claimed_by', sa.String(length=128), nullable=False),
    sa.Column('claim_token', sa.String(length=64), nullable=False),
    sa.Column('claimed_at', sa.DateTime(), nullable=True),
    sa.Column('heartbeat_at', sa.DateTime(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('error', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['submission_id'], ['submissions.id'], name=op.f('fk_jobs_submission_id_submissions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs'))
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index('ix_jobs_status_id', ['status', 'id'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_submission_id'), ['submission_id'], unique=False)

    op.create_table('runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('submission_id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('mode', sa.String(length=16), nullable=False),
    sa.Column('secret', sa.Boolean(), nullable=False),
    sa.Column('worker', sa.String(length=128), nullable=False),
    sa.Column('gpu', sa.String(length=128), nullable=False),
    sa.Column('system', sa.JSON(), nullable=False),
    sa.Column('started_at', sa.DateTime(), nullable=False),
    sa.Column('ended_at', sa.DateTime(), nullable=False),
    sa.Column('duration_s', sa.Float(), nullable=False),
    sa.Column('passed', sa.Boolean(), nullable=False),
    sa.Column('score_ms', sa.Float(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('result', sa.JSON(), nullable=False),
    sa.Column('report_text', sa.Text(), nullable=False),
    sa.Column('stdout_tail', sa.Text(), nullable=False),
    sa.Column('stderr_tail', sa.Text(), nullable=False),
    sa.Column('profile', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_runs_job_id_jobs')),
    sa.ForeignKeyConstraint(['submission_id'], ['submissions.id'], name=op.f('fk_runs_submission_id_submissions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_runs')),
    sa.UniqueConstraint('job_id', name=op.f('uq_runs_job_id'))
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_runs_submission_id'), ['submission_id'], unique=False)

    op.create_table('profile_files',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('size_bytes', sa.Integer(), nullable=False),
    sa.Column('content', sa.LargeBinary(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_profile_files_run_id_runs')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_profile_files'))
    )
    with op.batch_alter_table('profile_files', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_profile_files_run_id'), ['run_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('profile_files', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_profile_files_run_id'))

    op.drop_table('profile_files')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_runs_submission_id'))

    op.drop_table('runs')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_jobs_submission_id'))
        batch_op.drop_index('ix_jobs_status_id')

    op.drop_table('jobs')
    with op.batch_alter_table('submissions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_submissions_user_id'))
        batch_op.drop_index(batch_op.f('ix_submissions_status'))
        batch_op.drop_index('ix_submissions_lb_user')
        batch_op.drop_index(batch_op.f('ix_submissions_created_at'))

    op.drop_table('submissions')
    op.drop_table('rate_limits')
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_tokens_user_id'))

    op.drop_table('api_tokens')
    op.drop_table('users')
    with op.batch_alter_table('leaderboards', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_leaderboards_task'))

    op.drop_table('leaderboards')
    op.drop_table('code_files')
