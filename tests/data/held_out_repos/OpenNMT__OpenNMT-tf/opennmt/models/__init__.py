from opennmt.models.model import Model
from opennmt.models.model import SequenceToSequence
