# planted
