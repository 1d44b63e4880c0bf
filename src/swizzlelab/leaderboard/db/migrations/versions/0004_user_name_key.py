"""User names unique whatever their case (issue 57): users.name_key, the name in lower case, with a unique index.

Rows made before this rule may hold names that differ only in case: the later ones (by id) get the key
'name#id', so they stay as they are, and no new user can take either name in any case.

Revision ID: 0004
Revises: 0003
Create Date: 2027-01-10
"""

from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('name_key', sa.String(length=80), server_default='', nullable=False))
    op.execute("UPDATE users SET name_key = lower(name)")
    op.execute("UPDATE users SET name_key = name_key || '#' || CAST(id AS VARCHAR(20)) WHERE EXISTS "
               "(SELECT 1 FROM users AS earlier WHERE lower(earlier.name) = lower(users.name) AND earlier.id < users.id)")
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_users_name_key'), ['name_key'], unique=True)


def downgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_users_name_key'))
        batch_op.drop_column('name_key')
